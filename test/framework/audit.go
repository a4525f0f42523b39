package framework

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteAuditPolicy writes a kube-apiserver audit policy that records every
// write (create, update, patch, delete, deletecollection) at Metadata level
// and nothing else, and returns its path. Pass it as --audit-policy-file,
// with --audit-log-path, in ControlPlaneOptions.APIServerArgs. Every request
// of the users in everyRequestOf (reads, watches and discovery included) is
// recorded too, at Metadata level: the scale test counts the requests one
// deputy makes.
func WriteAuditPolicy(dir string, everyRequestOf ...string) (string, error) {
	policy := `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
`
	if len(everyRequestOf) > 0 {
		users, err := json.Marshal(everyRequestOf)
		if err != nil {
			return "", err
		}
		policy += "- level: Metadata\n  users: " + string(users) + "\n"
	}
	policy += `- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`
	p := filepath.Join(dir, "audit-policy.yaml")
	return p, os.WriteFile(p, []byte(policy), 0o600)
}

// AuditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type AuditEvent struct {
	Stage                    string       `json:"stage"`
	Verb                     string       `json:"verb"`
	User                     AuditUser    `json:"user"`
	ImpersonatedUser         *AuditUser   `json:"impersonatedUser,omitempty"`
	ObjectRef                *AuditObject `json:"objectRef,omitempty"`
	ResponseStatus           *AuditStatus `json:"responseStatus,omitempty"`
	RequestReceivedTimestamp time.Time    `json:"requestReceivedTimestamp"`
	// RequestURI is the request's path and query (dryRun=All marks a dry run);
	// it names a non-resource request (discovery), which has no objectRef.
	RequestURI string `json:"requestURI"`
}

// AuditUser is an audit event's user or impersonated user.
type AuditUser struct {
	Username string   `json:"username"`
	Groups   []string `json:"groups,omitempty"`
}

// AuditObject is an audit event's objectRef.
type AuditObject struct {
	Resource    string `json:"resource"`
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	APIGroup    string `json:"apiGroup"`
	Subresource string `json:"subresource"`
}

// AuditStatus is an audit event's responseStatus.
type AuditStatus struct {
	Code int `json:"code"`
}

// ReadAuditLog parses a JSON-lines audit log written by --audit-log-path.
func ReadAuditLog(path string) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEvent
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for line := 1; s.Scan(); line++ {
		var ev AuditEvent
		if err := json.Unmarshal(s.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, line, err)
		}
		out = append(out, ev)
	}
	return out, s.Err()
}

// WriteTokenKubeconfig writes a kubeconfig for this control plane that
// authenticates with a bearer token (for kubectl as that identity).
func (cp *ControlPlane) WriteTokenKubeconfig(path, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cp.Admin.Host, CertificateAuthorityData: cp.Admin.CAData}
	cfg.AuthInfos["token"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "token"}
	cfg.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*cfg, path)
}
