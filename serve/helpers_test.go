package serve

import (
	"bytes"
	"log/slog"
	"sync"

	"deputy.dev/deputy/policy"
)

// Tokens of the test policy (webhook's API test policy).
const (
	aliceAPIToken = "alice-secret-token-0001"
	bobAPIToken   = "bob-secret-token-0002"
	daveAPIToken  = "dave-secret-token-0003"
)

// testPolicy: alice may sync and read Applications in guestbook (a Role
// bound to her); everyone authenticated may read Applications in public (a
// binding to system:authenticated); bob may do nothing; the group deployers
// (client certificates with O=deployers) may sync in guestbook.
var testPolicy = []policy.SourceFile{
	{Name: "apps.yaml", Data: []byte(`apiVersion: deputy.dev/v1alpha1
kind: AppProject
metadata: {name: guestbook, namespace: guestbook}
spec:
  sourceRepos: ["*"]
  destinations: [{server: https://kubernetes.default.svc, namespace: guestbook}]
  destinationServiceAccounts: [{server: https://kubernetes.default.svc, namespace: guestbook, defaultServiceAccount: guestbook-deployer}]
---
apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: guestbook, namespace: guestbook}
spec:
  project: guestbook
  source: {repoURL: https://example.test/guestbook.git, path: guestbook}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
---
apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: orphan, namespace: guestbook}
spec:
  project: missing
  source: {repoURL: https://example.test/guestbook.git}
  destination: {server: https://kubernetes.default.svc}
---
apiVersion: deputy.dev/v1alpha1
kind: Application
metadata: {name: board, namespace: public}
spec:
  project: guestbook
  source: {repoURL: https://example.test/board.git}
  destination: {server: https://kubernetes.default.svc}
`)},
	{Name: "rbac.yaml", Data: []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: application-syncer}
rules:
- apiGroups: [deputy.dev]
  resources: [applications/sync]
  verbs: [create]
- apiGroups: [deputy.dev]
  resources: [applications]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: guestbook-syncers, namespace: guestbook}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: application-syncer}
subjects:
- {kind: User, name: alice}
- {kind: Group, name: deployers}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: application-viewer}
rules:
- apiGroups: [deputy.dev]
  resources: [applications]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: everyone-views, namespace: public}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: application-viewer}
subjects:
- {kind: Group, name: "system:authenticated"}
`)},
	{Name: "tokens.csv", Data: []byte(aliceAPIToken + ",alice,alice-uid\n" + bobAPIToken + ",bob,bob-uid\n" + daveAPIToken + ",dave,dave-uid\n")},
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const clusterTestKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://a.example:6443"}
- name: b
  cluster: {server: "https://b.example:6443"}
users:
- name: u
  user: {token: not-a-secret}
contexts:
- name: ctx-a
  context: {cluster: a, user: u}
- name: ctx-b
  context: {cluster: b, user: u}
current-context: ctx-a
`
