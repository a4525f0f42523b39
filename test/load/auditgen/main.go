// Command auditgen writes a synthetic kube-apiserver audit log (audit.k8s.io/v1
// Event JSON lines at level Metadata, ResponseComplete stage) of about -size
// bytes, for the replay benchmark in docs/benchmarks.md. Usage:
//
//	auditgen -size 1GiB -o /tmp/audit.log [-seed 1] [-policy /tmp/policy.yaml]
//
// The events look like a busy cluster's: ~1.3 KB each with auditID,
// userAgent, sourceIPs, timestamps, objectRef, responseStatus and the
// authorization annotations; 300 users and 40 ServiceAccounts in groups,
// the verbs of kubectl and controllers over 14 resources in 50 namespaces
// with 2,000 object names; 10% non-resource requests (discovery, /version,
// /healthz), 5% impersonated (a ServiceAccount or a user with groups).
// The output is the same for the same seed. -policy also writes an RBAC
// policy for the log's identities: groups team-0 to team-17 and every
// ServiceAccount may do everything to the log's resources but secrets, so
// that a replay finds mostly unchanged requests and some of each change.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

type userInfo struct {
	Username string              `json:"username"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	Extra    map[string][]string `json:"extra,omitempty"`
}

type objectRef struct {
	Resource    string `json:"resource,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	APIGroup    string `json:"apiGroup,omitempty"`
	APIVersion  string `json:"apiVersion,omitempty"`
	Subresource string `json:"subresource,omitempty"`
}

type status struct {
	Metadata struct{} `json:"metadata"`
	Status   string   `json:"status,omitempty"`
	Message  string   `json:"message,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Code     int      `json:"code"`
}

type event struct {
	Kind                     string            `json:"kind"`
	APIVersion               string            `json:"apiVersion"`
	Level                    string            `json:"level"`
	AuditID                  string            `json:"auditID"`
	Stage                    string            `json:"stage"`
	RequestURI               string            `json:"requestURI"`
	Verb                     string            `json:"verb"`
	User                     userInfo          `json:"user"`
	ImpersonatedUser         *userInfo         `json:"impersonatedUser,omitempty"`
	SourceIPs                []string          `json:"sourceIPs"`
	UserAgent                string            `json:"userAgent"`
	ObjectRef                *objectRef        `json:"objectRef,omitempty"`
	ResponseStatus           status            `json:"responseStatus"`
	RequestReceivedTimestamp string            `json:"requestReceivedTimestamp"`
	StageTimestamp           string            `json:"stageTimestamp"`
	Annotations              map[string]string `json:"annotations"`
}

type resource struct{ group, version, name string }

var resources = []resource{
	{"", "v1", "pods"}, {"", "v1", "configmaps"}, {"", "v1", "secrets"}, {"", "v1", "services"}, {"", "v1", "endpoints"},
	{"", "v1", "events"}, {"", "v1", "serviceaccounts"}, {"apps", "v1", "deployments"}, {"apps", "v1", "replicasets"},
	{"apps", "v1", "statefulsets"}, {"batch", "v1", "jobs"}, {"networking.k8s.io", "v1", "ingresses"},
	{"coordination.k8s.io", "v1", "leases"}, {"argoproj.io", "v1alpha1", "applications"},
}

var verbs = []string{"get", "get", "get", "list", "list", "watch", "create", "update", "patch", "patch", "delete"}

var paths = []string{"/api", "/apis", "/version", "/healthz", "/openapi/v2", "/apis/apps/v1", "/readyz", "/api/v1"}

var agents = []string{"kubectl/v1.37.2 (linux/amd64) kubernetes/0d2c7b1", "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/0d2c7b1/system:serviceaccount:kube-system:replicaset-controller",
	"argocd-application-controller/v3.2.0 (linux/amd64)", "Go-http-client/2.0", "helm/v3.19.0 (linux/amd64)"}

func main() {
	size := flag.String("size", "1GiB", "approximate output size: N, NKiB, NMiB or NGiB")
	out := flag.String("o", "", "output file (default stdout)")
	seed := flag.Uint64("seed", 1, "random seed")
	policyFile := flag.String("policy", "", "also write a policy for the log's identities to this file")
	flag.Parse()
	if *policyFile != "" {
		if err := os.WriteFile(*policyFile, []byte(benchPolicy()), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	limit, err := parseSize(*size)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	w := os.Stdout
	if *out != "" {
		if w, err = os.Create(*out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	n, written, err := generate(bw, limit, rand.New(rand.NewPCG(*seed, *seed^0x9e3779b97f4a7c15)))
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && w != os.Stdout {
		err = w.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "auditgen: %d events, %d bytes\n", n, written)
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if v, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = v, m
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("-size %q: want a positive number with an optional KiB, MiB or GiB suffix", s)
	}
	return n * mult, nil
}

func generate(w *bufio.Writer, limit int64, r *rand.Rand) (int64, int64, error) {
	start := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	var n, written int64
	for written < limit {
		ev := next(r, start.Add(time.Duration(n)*time.Millisecond))
		b, err := json.Marshal(ev)
		if err != nil {
			return n, written, err
		}
		if _, err := w.Write(b); err != nil {
			return n, written, err
		}
		if err := w.WriteByte('\n'); err != nil {
			return n, written, err
		}
		written += int64(len(b)) + 1
		n++
	}
	return n, written, nil
}

func hex(r *rand.Rand, n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = digits[r.IntN(16)]
	}
	return string(b)
}

func uuid(r *rand.Rand) string {
	return hex(r, 8) + "-" + hex(r, 4) + "-" + hex(r, 4) + "-" + hex(r, 4) + "-" + hex(r, 12)
}

func someUser(r *rand.Rand) userInfo {
	if r.IntN(4) == 0 {
		ns := "ns-" + strconv.Itoa(r.IntN(50))
		sa := "sa-" + strconv.Itoa(r.IntN(40))
		return userInfo{Username: "system:serviceaccount:" + ns + ":" + sa, UID: uuid(r),
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			Extra: map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=" + uuid(r)},
				"authentication.kubernetes.io/pod-name": {"pod-" + hex(r, 5)}, "authentication.kubernetes.io/pod-uid": {uuid(r)}}}
	}
	u := r.IntN(300)
	return userInfo{Username: "user-" + strconv.Itoa(u) + "@example.com",
		Groups: []string{"team-" + strconv.Itoa(u%20), "devs", "system:authenticated"},
		Extra:  map[string][]string{"authentication.kubernetes.io/credential-id": {"X509SHA256=" + hex(r, 64)}}}
}

func next(r *rand.Rand, at time.Time) *event {
	ev := &event{Kind: "Event", APIVersion: "audit.k8s.io/v1", Level: "Metadata", AuditID: uuid(r), Stage: "ResponseComplete",
		User: someUser(r), SourceIPs: []string{"10.0." + strconv.Itoa(r.IntN(256)) + "." + strconv.Itoa(r.IntN(256))},
		UserAgent: agents[r.IntN(len(agents))], Annotations: map[string]string{}}
	ev.RequestReceivedTimestamp = at.Format("2006-01-02T15:04:05.000000Z")
	ev.StageTimestamp = at.Add(time.Duration(1+r.IntN(40)) * time.Millisecond).Format("2006-01-02T15:04:05.000000Z")
	if r.IntN(10) == 0 {
		ev.Verb, ev.RequestURI = "get", paths[r.IntN(len(paths))]
	} else {
		res := resources[r.IntN(len(resources))]
		ev.Verb = verbs[r.IntN(len(verbs))]
		ns := "ns-" + strconv.Itoa(r.IntN(50))
		ref := &objectRef{Resource: res.name, Namespace: ns, APIGroup: res.group, APIVersion: res.version}
		base := "/apis/" + res.group + "/" + res.version
		if res.group == "" {
			base = "/api/v1"
		}
		ev.RequestURI = base + "/namespaces/" + ns + "/" + res.name
		switch ev.Verb {
		case "list":
			ev.RequestURI += "?limit=500"
		case "watch":
			ev.RequestURI += "?allowWatchBookmarks=true&resourceVersion=" + strconv.Itoa(r.IntN(1e7)) + "&timeoutSeconds=" + strconv.Itoa(300+r.IntN(300)) + "&watch=true"
		case "create":
			ref.Name = res.name[:len(res.name)-1] + "-" + strconv.Itoa(r.IntN(2000))
		default:
			ref.Name = res.name[:len(res.name)-1] + "-" + strconv.Itoa(r.IntN(2000))
			ev.RequestURI += "/" + ref.Name
			if res.name == "pods" && r.IntN(5) == 0 {
				ref.Subresource = "status"
				ev.RequestURI += "/status"
			}
		}
		ev.ObjectRef = ref
	}
	if r.IntN(20) == 0 {
		requestor := ev.User
		ev.User = userInfo{Username: "system:serviceaccount:argocd:argocd-application-controller", UID: uuid(r),
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:argocd", "system:authenticated"}}
		ev.ImpersonatedUser = &userInfo{Username: requestor.Username, Groups: requestor.Groups}
	}
	if r.IntN(8) == 0 {
		ev.ResponseStatus = status{Status: "Failure", Reason: "Forbidden", Code: 403,
			Message: ev.Verb + " is forbidden: User \"" + ev.User.Username + "\" cannot " + ev.Verb + " resource in the namespace"}
		ev.Annotations["authorization.k8s.io/decision"] = "forbid"
		ev.Annotations["authorization.k8s.io/reason"] = ""
	} else {
		ev.ResponseStatus = status{Code: 200}
		if ev.Verb == "create" {
			ev.ResponseStatus.Code = 201
		}
		ev.Annotations["authorization.k8s.io/decision"] = "allow"
		ev.Annotations["authorization.k8s.io/reason"] = "RBAC: allowed by ClusterRoleBinding \"team-" + strconv.Itoa(r.IntN(20)) + "-edit\" of ClusterRole \"edit\" to Group \"team-" + strconv.Itoa(r.IntN(20)) + "\""
	}
	if ev.ObjectRef != nil {
		ev.Annotations["pod-security.kubernetes.io/enforce-policy"] = "restricted:latest"
	}
	return ev
}

// benchPolicy is the policy -policy writes.
func benchPolicy() string {
	groups := map[string]bool{}
	var res []string
	for _, r := range resources {
		if r.name != "secrets" {
			res = append(res, r.name)
		}
		groups[r.group] = true
	}
	var gs []string
	for g := range groups {
		gs = append(gs, strconv.Quote(g))
	}
	slices.Sort(gs)
	var subjects strings.Builder
	for i := range 18 {
		subjects.WriteString("- {kind: Group, apiGroup: rbac.authorization.k8s.io, name: team-" + strconv.Itoa(i) + "}\n")
	}
	subjects.WriteString("- {kind: Group, apiGroup: rbac.authorization.k8s.io, name: system:serviceaccounts}\n")
	return `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: bench-edit}
rules:
- apiGroups: [` + strings.Join(gs, ", ") + `]
  resources: [` + strings.Join(res, ", ") + `, pods/status]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bench-edit}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: bench-edit}
subjects:
` + subjects.String()
}
