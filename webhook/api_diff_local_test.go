package webhook

import (
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"deputy.dev/deputy/apiclient"
	"deputy.dev/deputy/policy/v1alpha1"
)

const localConfigMap = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web"},"data":{"n":"1"},"spec":{"big":9007199254740993}}`

func TestAPILocalDiffAuthorization(t *testing.T) {
	f := newDiffFixture(t, &fakeDiffer{}, 0)
	body := `{"objects":[` + localConfigMap + `]}`
	// dave may get applications/diff: a GET diff, not a local one.
	resp := f.do(t, http.MethodPost, diffPath, daveAPIToken, "application/json", body)
	if resp.code != http.StatusForbidden || !strings.Contains(resp.body, `User \"dave\" cannot create resource \"applications/diff\"`) {
		t.Errorf("dave's local diff: %d %s", resp.code, resp.body)
	}
	// alice may create applications/diff: local diffs only.
	if resp := f.do(t, http.MethodPost, diffPath, aliceAPIToken, "application/json", body); resp.code != http.StatusOK || !strings.Contains(resp.body, `"kind":"ApplicationDiff"`) {
		t.Errorf("alice's local diff: %d %s", resp.code, resp.body)
	}
	if resp := f.do(t, http.MethodGet, diffPath, aliceAPIToken, "", ""); resp.code != http.StatusForbidden {
		t.Errorf("alice's GET diff: %d %s", resp.code, resp.body)
	}
}

func TestAPILocalDiffPassesTheObjects(t *testing.T) {
	differ := &fakeDiffer{}
	f := newDiffFixture(t, differ, 0)
	resp := f.do(t, http.MethodPost, diffPath, aliceAPIToken, "", `{"objects":[`+localConfigMap+`,{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"guestbook"}}]}`)
	if resp.code != http.StatusOK {
		t.Fatalf("code %d: %s", resp.code, resp.body)
	}
	reqs := differ.requests()
	if len(reqs) != 1 || len(reqs[0].Objects) != 2 {
		t.Fatalf("requests %+v", reqs)
	}
	req := reqs[0]
	if req.Sync.Revision != "" || len(req.Sync.Revisions) != 0 || req.Application.Name != "guestbook" {
		t.Errorf("request %+v", req)
	}
	cm := req.Objects[0]
	if cm.GetKind() != "ConfigMap" || cm.GetName() != "web" || cm.Object["spec"].(map[string]any)["big"] != int64(9007199254740993) {
		t.Errorf("object 0 %#v", cm.Object)
	}
	if d := req.Objects[1]; d.GetKind() != "Deployment" || d.GetNamespace() != "guestbook" {
		t.Errorf("object 1 %#v", d.Object)
	}
}

func TestAPILocalDiffRefusesBadBodies(t *testing.T) {
	differ := &fakeDiffer{}
	f := newDiffFixture(t, differ, 0)
	big := `{"objects":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a":"` + strings.Repeat("x", v1alpha1.MaxLocalDiffRequestBytes) + `"}}]}`
	for _, tc := range []struct {
		name, path, contentType, body string
		want                          int
		message                       string
	}{
		{"empty body", diffPath, "", "", 400, "request body is empty"},
		{"not JSON", diffPath, "application/json", "objects: []", 400, "failed to decode the local diff request"},
		{"unknown field", diffPath, "application/json", `{"objects":[` + localConfigMap + `],"revision":"v2"}`, 400, `unknown field \"revision\"`},
		{"wrong case", diffPath, "application/json", `{"Objects":[` + localConfigMap + `]}`, 400, `unknown field \"Objects\"`},
		{"no objects", diffPath, "application/json", `{"objects":[]}`, 400, "objects is empty"},
		{"null objects", diffPath, "application/json", `{}`, 400, "objects is empty"},
		{"not an object", diffPath, "application/json", `{"objects":[` + localConfigMap + `,"x"]}`, 400, "objects[1] is not a JSON object"},
		{"no apiVersion", diffPath, "application/json", `{"objects":[{"kind":"ConfigMap","metadata":{"name":"x"}}]}`, 400, "objects[0] has no apiVersion"},
		{"no kind", diffPath, "application/json", `{"objects":[{"apiVersion":"v1","metadata":{"name":"x"}}]}`, 400, "objects[0] has no kind"},
		{"no name", diffPath, "application/json", `{"objects":[{"apiVersion":"v1","kind":"Secret","metadata":{"generateName":"x-"},"data":{"password":"c2VjcmV0"}}]}`, 400, "objects[0] (v1 Secret) has no metadata.name"},
		{"a List", diffPath, "application/json", `{"objects":[{"apiVersion":"v1","kind":"List","items":[]}]}`, 400, "objects[0] is a List: send its items"},
		{"a query", diffPath + "?revision=v2", "application/json", `{"objects":[` + localConfigMap + `]}`, 400, `unknown query parameter \"revision\"`},
		{"not JSON content", diffPath, "application/yaml", "objects: []", 415, "send application/json"},
		{"too large", diffPath, "application/json", big, 413, "diff fewer or smaller manifests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.do(t, http.MethodPost, tc.path, aliceAPIToken, tc.contentType, tc.body)
			if resp.code != tc.want || !strings.Contains(resp.body, tc.message) {
				t.Errorf("code %d, want %d with %s: %.300s", resp.code, tc.want, tc.message, resp.body)
			}
			if strings.Contains(resp.body, "c2VjcmV0") {
				t.Errorf("the answer quotes a Secret's value: %s", resp.body)
			}
		})
	}
	if n := len(differ.requests()); n != 0 {
		t.Errorf("%d diffs ran for bad bodies", n)
	}
}

func TestAPILocalDiffErrorsAsTheDiff(t *testing.T) {
	f := newDiffFixture(t, &fakeDiffer{err: fmt.Errorf("the manifests break AppProject %q", "guestbook")}, 0)
	resp := f.do(t, http.MethodPost, diffPath, aliceAPIToken, "", `{"objects":[`+localConfigMap+`]}`)
	if resp.code != http.StatusUnprocessableEntity || !strings.Contains(resp.body, "the manifests break AppProject") {
		t.Errorf("code %d: %s", resp.code, resp.body)
	}
	if resp := f.do(t, http.MethodPost, APIPrefix+"/namespaces/guestbook/applications/nope/diff", aliceAPIToken, "", `{"objects":[`+localConfigMap+`]}`); resp.code != http.StatusNotFound {
		t.Errorf("unknown Application: %d %s", resp.code, resp.body)
	}
}

func TestAPIClientDiffLocal(t *testing.T) {
	differ := &fakeDiffer{}
	f := newDiffFixture(t, differ, 0)
	srv := httptest.NewTLSServer(f.handler)
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	client, err := apiclient.New(apiclient.Options{Server: srv.URL, Token: aliceAPIToken, CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(localConfigMap), &obj); err != nil {
		t.Fatal(err)
	}
	d, err := client.DiffLocal(t.Context(), "guestbook", "guestbook", []map[string]any{obj})
	if err != nil || len(d.Resources) != 2 {
		t.Fatalf("DiffLocal: %+v, %v", d, err)
	}
	if reqs := differ.requests(); len(reqs) != 1 || len(reqs[0].Objects) != 1 || reqs[0].Objects[0].GetName() != "web" {
		t.Errorf("requests %+v", reqs)
	}
	_, err = client.DiffLocal(t.Context(), "guestbook", "guestbook", nil)
	var se *apiclient.StatusError
	if !errors.As(err, &se) || se.Status.Code != http.StatusBadRequest || !strings.Contains(se.Status.Message, "objects is empty") {
		t.Errorf("no objects: %v", err)
	}
}
