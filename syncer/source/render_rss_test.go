package source

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"deputy.dev/deputy/policy/v1alpha1"
)

// TestRenderRSS measures deputy's peak RSS (VmHWM) for the issue 12 review's
// hostile repositories, each in a fresh test process: YAML aliases in a
// kustomize input, one patch copied into every object, a pack of many tiny
// objects, and the plain-manifest decoder's worst case. "before" runs
// kustomize in deputy's own process and fetches without an object count
// limit (as until issue 12); "after" is the engine's render with the
// default limits ("raised": maxFileBytes 128Mi). It takes several minutes and is skipped unless
// DEPUTY_RENDER_RSS=1 (DEPUTY_RENDER_RSS_CASES=alias,amplify,real,objects,plain,helm
// picks cases, plain-before adds the plain decoder in process, which takes
// 10 GB; the figures are in docs/benchmarks.md):
//
//	DEPUTY_RENDER_RSS=1 go test -count=1 -timeout 30m -run 'TestRenderRSS$' -v ./syncer/source/
func TestRenderRSS(t *testing.T) {
	if os.Getenv("DEPUTY_RENDER_RSS") != "1" {
		t.Skip("set DEPUTY_RENDER_RSS=1 to measure (several minutes)")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	cases := map[string]bool{}
	for _, c := range strings.Split(cmp.Or(os.Getenv("DEPUTY_RENDER_RSS_CASES"), "alias,amplify,real,objects,plain,helm"), ",") {
		cases[c] = true
	}
	// One repository per case, so that each fetch holds only its case.
	srv := newGitServer(t)
	urls := map[string]string{}
	repo := func(name string, write func(r *testRepo)) {
		r, url := srv.repo(t, name)
		write(r)
		r.commit(name)
		urls[name] = url
	}
	repo("lol", func(r *testRepo) {
		for depth := 6; depth <= 8; depth++ {
			r.write(fmt.Sprintf("lol%d/kustomization.yaml", depth), "resources:\n- cm.yaml\n")
			r.write(fmt.Sprintf("lol%d/cm.yaml", depth), laughs(depth))
		}
	})
	repo("amp", func(r *testRepo) {
		for _, n := range []int{400, 2000} {
			amplified(r, fmt.Sprintf("amp%d", n), n, 256<<10)
		}
	})
	// The plain decoder's worst case within the default limits: 8 files of
	// 31 MiB (maxFileBytes 32Mi, maxRenderBytes 256Mi), each one object
	// whose spec is a list of empty lists (3 bytes an element).
	if cases["plain"] || cases["plain-before"] {
		repo("plain", func(r *testRepo) {
			for i := range 8 {
				r.write(fmt.Sprintf("plain/o%d.yaml", i), fmt.Sprintf("apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: t%d}\nspec: [", i)+strings.Repeat("[],", (31<<20)/3)+"[]]\n")
			}
		})
	}
	// A large real application: 3,000 Deployments (4.5 MB of YAML) and
	// 30 CRDs of 100 KB each, with labels, a namespace and a patch.
	if cases["real"] {
		repo("real", func(r *testRepo) {
			var deps, crds strings.Builder
			for i := range 3000 {
				fmt.Fprintf(&deps, "---\n%s", strings.ReplaceAll(realDeployment, "NAME", fmt.Sprint("app-", i)))
			}
			for i := range 30 {
				fmt.Fprintf(&crds, "---\n%s", realCRD(i, 100<<10))
			}
			r.write("real/deployments.yaml", deps.String())
			r.write("real/crds.yaml", crds.String())
			r.write("real/kustomization.yaml", "namespace: prod\ncommonLabels: {team: a}\nresources:\n- deployments.yaml\n- crds.yaml\n"+
				"patches:\n- target: {kind: Deployment}\n  patch: |\n    - op: add\n      path: /spec/template/metadata/annotations\n      value: {rollout: \"1\"}\n")
			r.write("real-plain/deployments.yaml", deps.String())
			r.write("real-plain/crds.yaml", crds.String())
		})
	}
	// Hostile Helm charts (issue 14): one rendering 100k objects, one whose
	// values.yaml is 100 MB, and one whose values.yaml is within
	// maxFileBytes (31 MB) but holds 1.6 million keys that a template
	// prints back (toYaml) into one ConfigMap.
	if cases["helm"] {
		repo("helm", func(r *testRepo) {
			r.write("helm-many/Chart.yaml", "apiVersion: v2\nname: many\nversion: 0.1.0\n")
			r.write("helm-many/templates/cm.yaml", "{{ range until 100000 }}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-{{ . }}}\n{{ end }}")
			var keys strings.Builder
			for i := 0; keys.Len() < 31<<20; i++ {
				fmt.Fprintf(&keys, "k%07d: v\n", i)
			}
			r.write("helm-keys/Chart.yaml", "apiVersion: v2\nname: keys\nversion: 0.1.0\n")
			r.write("helm-keys/values.yaml", keys.String())
			r.write("helm-keys/templates/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keys}\ndata:\n{{ toYaml .Values | indent 2 }}\n")
		})
		// Its own repository: the fetch refuses the 100 MB blob unless
		// maxFileBytes is raised ("raised": 128Mi).
		repo("helmbig", func(r *testRepo) {
			r.write("helmbig-values/Chart.yaml", "apiVersion: v2\nname: values\nversion: 0.1.0\n")
			r.write("helmbig-values/templates/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: {len: {{ len .Values.a | quote }}}\n")
			r.write("helmbig-values/values.yaml", "a: "+strings.Repeat("x", 100<<20)+"\n")
		})
	}
	if cases["objects"] {
		// 1,001,005 objects, and (many-at-limit) as many as the default
		// maxFetchObjects allows.
		manyObjects(t, filepath.Join(srv.root, "many.git"), 1000000)
		urls["many"] = srv.URL + "/many.git"
		manyObjects(t, filepath.Join(srv.root, "many-at-limit.git"), DefaultMaxFetchObjects-1000)
		urls["many-at-limit"] = srv.URL + "/many-at-limit.git"
	}
	type run struct{ c, mode, path string }
	var runs []run
	add := func(c string, rs ...run) {
		if cases[c] {
			runs = append(runs, rs...)
		}
	}
	add("alias", run{"idle", "idle", ""}, run{"alias", "before", "lol6"}, run{"alias", "after", "lol6"}, run{"alias", "after", "lol8"})
	add("amplify", run{"amplify", "before", "amp400"}, run{"amplify", "after", "amp400"}, run{"amplify", "after", "amp2000"})
	add("objects", run{"objects", "before", "many"}, run{"objects", "after", "many"}, run{"objects", "after", "many-at-limit"})
	add("real", run{"real", "before", "real"}, run{"real", "after", "real"}, run{"real", "before", "real-plain"}, run{"real", "after", "real-plain"})
	add("plain", run{"plain", "after", "plain"})
	add("helm", run{"helm", "after", "helm-many"}, run{"helm", "after", "helm-keys"}, run{"helm", "after", "helmbig-values"}, run{"helm", "raised", "helmbig-values"})
	// 10 GB of RSS: only when asked for.
	add("plain-before", run{"plain", "before", "plain"})
	for _, rn := range runs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRenderRSSChild$", "-test.v", "-test.timeout=20m")
		repoURL, best := urls["lol"], ""
		for name, u := range urls {
			if strings.HasPrefix(rn.path, name) && len(name) > len(best) {
				repoURL, best = u, name
			}
		}
		cmd.Env = append(os.Environ(), "DEPUTY_RENDER_RSS_CHILD="+rn.mode, "DEPUTY_RENDER_RSS_URL="+repoURL, "DEPUTY_RENDER_RSS_PATH="+cmp.Or(rn.path, "app"))
		out, err := cmd.CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "RESULT") {
				t.Log(strings.TrimSpace(line))
			}
		}
		if err != nil {
			t.Errorf("%s %s %s: %v\n%s", rn.c, rn.mode, rn.path, err, out)
		}
	}
}

// TestRenderRSSChild is TestRenderRSS's measured process.
func TestRenderRSSChild(t *testing.T) {
	mode, url, p := os.Getenv("DEPUTY_RENDER_RSS_CHILD"), os.Getenv("DEPUTY_RENDER_RSS_URL"), os.Getenv("DEPUTY_RENDER_RSS_PATH")
	if mode == "" {
		t.Skip("run by TestRenderRSS")
	}
	ctx := context.Background()
	src := v1alpha1.ApplicationSource{RepoURL: url, Path: p}
	if strings.HasPrefix(p, "many") {
		src.Path = "app" // the fetch is what is measured
	}
	start := time.Now()
	var err error
	n := 0
	worker := ""
	switch mode {
	case "idle":
		// The test process itself, for reference.
	case "before":
		if strings.HasPrefix(p, "many") {
			// No object count limit, as until issue 12.
			c := &Cache{dir: t.TempDir(), limits: Limits{MaxFetchObjects: 1 << 30}}
			_, err = c.Render(ctx, src, "")
			break
		}
		var objs []*unstructured.Unstructured
		objs, err = renderInProcess(ctx, t.TempDir(), url, p)
		n = len(objs)
	case "after", "raised":
		c := &Cache{dir: t.TempDir(), limits: DefaultLimits()}
		if mode == "raised" {
			c.limits.MaxFileBytes = 128 << 20
		}
		var out *Rendered
		out, err = c.Render(ctx, src, "")
		if out != nil {
			n = len(out.Objects)
			if out.worker != nil {
				worker = fmt.Sprintf(" (the render worker: peak Go memory %d MB, VmHWM %d MB)", out.worker.PeakMemory/1e6, out.worker.PeakRSS/1e6)
			}
		}
	}
	msg := "<nil>"
	if err != nil {
		msg = err.Error()
		if len(msg) > 240 {
			msg = msg[:240] + "…"
		}
	}
	fmt.Printf("RESULT %s %s: VmHWM %d MB, %d objects, %s, error: %s%s\n", mode, cmp.Or(p, "-"), procStatusBytes("VmHWM:")/1e6, n, time.Since(start).Round(100*time.Millisecond), msg, worker)
}

// renderInProcess renders dir as deputy did until issue 12: in its own
// process (kustomize included), the objects decoded as they come.
func renderInProcess(ctx context.Context, cacheDir, url, dir string) ([]*unstructured.Unstructured, error) {
	repo, err := git.PlainCloneContext(ctx, cacheDir, true, &git.CloneOptions{URL: url})
	if err != nil {
		return nil, err
	}
	head, err := repo.Head()
	if err != nil {
		return nil, err
	}
	commit, err := repo.CommitObject(head.Hash())
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	err = renderCommit(repo, commit, url, dir, dir, nil, nil, newRenderBudget(ctx, DefaultLimits()), KustomizeOptions{}, nil, func(string) {}, func(data []byte) error {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return err
		}
		objs = append(objs, u)
		return nil
	})
	return objs, err
}

// realDeployment is a typical Deployment (about 1.5 KB of YAML).
const realDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: NAME
  labels: {app: NAME, tier: web}
spec:
  replicas: 3
  selector:
    matchLabels: {app: NAME}
  template:
    metadata:
      labels: {app: NAME, tier: web}
    spec:
      serviceAccountName: NAME
      containers:
      - name: main
        image: registry.example.com/team/NAME:v1.2.3
        args: [--port=8080, --log-level=info]
        ports:
        - {name: http, containerPort: 8080}
        env:
        - {name: MODE, value: production}
        - name: POD_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        resources:
          requests: {cpu: 100m, memory: 128Mi}
          limits: {memory: 256Mi}
        readinessProbe:
          httpGet: {path: /healthz, port: http}
          periodSeconds: 5
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
`

// realCRD is a CustomResourceDefinition of about size bytes whose schema
// has many small properties, as generated CRDs do.
func realCRD(i, size int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things%d.example.com\nspec:\n  group: example.com\n  names: {kind: Thing%d, plural: things%d}\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n", i, i, i)
	for j := 0; b.Len() < size; j++ {
		fmt.Fprintf(&b, "          field%d:\n            description: The field number %d of the thing, as the API documents it.\n            type: string\n", j, j)
	}
	return b.String()
}
