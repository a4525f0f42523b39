package health

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"deputy.dev/deputy/policy/v1alpha1"
)

// healthCase is one document of testdata/*.yaml: an object as a cluster
// returns it, what deputy answers, and what kstatus and Argo CD answer.
type healthCase struct {
	// Case names the case (a sentence, the subtest's name).
	Case string `json:"case"`
	// From names the upstream case(s) ported: "kstatus <test case>",
	// "argo-cd <testdata file>", or "deputy" for deputy's own.
	From string `json:"from"`
	// Want is Assess' code, Message a substring of its message.
	Want    string `json:"want"`
	Message string `json:"message,omitempty"`
	// KStatus is kstatus' verdict in Argo CD's codes (checked: a kstatus
	// upgrade that changes it fails the case).
	KStatus string `json:"kstatus"`
	// ArgoCD is Argo CD's code (from its tables or its code; "none": Argo
	// CD assesses no health for the kind and counts the resource done).
	ArgoCD string `json:"argocd,omitempty"`
	// Hook is HookPhase's phase, ArgoCDHook Argo CD's for the same hook.
	Hook       string `json:"hook,omitempty"`
	ArgoCDHook string `json:"argocdHook,omitempty"`
	// Why says which one deputy follows and why, required exactly when
	// deputy's answer differs from kstatus' or Argo CD's.
	Why    string         `json:"why,omitempty"`
	Object map[string]any `json:"object"`
}

func loadCases(t *testing.T) []healthCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	var out []healthCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var c healthCase
			if err := yaml.UnmarshalStrict(doc, &c); err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			c.From = filepath.Base(f) + ": " + c.From
			out = append(out, c)
		}
	}
	return out
}

// object turns a case's object into what a client reads (integers as
// int64, as the unstructured JSON decoder makes them).
func object(t *testing.T, m map[string]any) *unstructured.Unstructured {
	t.Helper()
	data, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		t.Fatalf("the case's object does not decode: %v", err)
	}
	return u
}

var codes = []string{
	v1alpha1.HealthStatusHealthy, v1alpha1.HealthStatusSuspended, v1alpha1.HealthStatusProgressing,
	v1alpha1.HealthStatusMissing, v1alpha1.HealthStatusDegraded, v1alpha1.HealthStatusUnknown,
}

// sameAs reports whether deputy's code agrees with an upstream answer
// (Argo CD's "none" counts as Healthy: the resource counts as done).
func sameAs(want, upstream string) bool {
	return upstream == "" || want == upstream || (upstream == "none" && want == v1alpha1.HealthStatusHealthy)
}

func TestAssessUpstreamCases(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range loadCases(t) {
		t.Run(c.Case, func(t *testing.T) {
			if c.Case == "" || seen[c.Case] {
				t.Fatalf("%s: the case's name is empty or not unique: %q", c.From, c.Case)
			}
			seen[c.Case] = true
			for _, code := range []string{c.Want, c.KStatus} {
				if !contains(codes, code) {
					t.Fatalf("%s: %q is not a health code", c.From, code)
				}
			}
			if c.ArgoCD != "" && c.ArgoCD != "none" && !contains(codes, c.ArgoCD) {
				t.Fatalf("%s: argocd %q is not a health code", c.From, c.ArgoCD)
			}
			u := object(t, c.Object)

			got := Assess(u)
			if got.Status != c.Want || !strings.Contains(got.Message, c.Message) {
				t.Errorf("%s: Assess = %s (%q), want %s (message containing %q)", c.From, got.Status, got.Message, c.Want, c.Message)
			}
			if k := kstatus(u); k.Status != c.KStatus {
				t.Errorf("%s: kstatus says %s (%q), the case records %s", c.From, k.Status, k.Message, c.KStatus)
			}
			if c.Hook != "" {
				if phase, msg := HookPhase(u); phase != c.Hook {
					t.Errorf("%s: HookPhase = %s (%q), want %s", c.From, phase, msg, c.Hook)
				}
			}
			diverges := !sameAs(c.Want, c.KStatus) || !sameAs(c.Want, c.ArgoCD) ||
				(c.ArgoCDHook != "" && c.ArgoCDHook != c.Hook)
			if diverges && c.Why == "" {
				t.Errorf("%s: deputy answers %s/%s where kstatus says %s and Argo CD %s/%s: say why", c.From, c.Want, c.Hook, c.KStatus, c.ArgoCD, c.ArgoCDHook)
			}
			if !diverges && c.Why != "" {
				t.Errorf("%s: why is set but deputy agrees with kstatus and Argo CD: drop it", c.From)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestAssessOfNothingIsMissing(t *testing.T) {
	if got := Assess(nil); got.Status != v1alpha1.HealthStatusMissing {
		t.Errorf("Assess(nil) = %v, want Missing", got)
	}
}

func TestHookPhaseOfAHookNotCreatedYetIsRunning(t *testing.T) {
	if phase, _ := HookPhase(nil); phase != v1alpha1.HookPhaseRunning {
		t.Errorf("HookPhase(nil) = %s, want Running", phase)
	}
}

func TestWorseRanksAsArgoCD(t *testing.T) {
	// codes is Argo CD's healthOrder, best first.
	for i, a := range codes {
		for j, b := range codes {
			if got := Worse(a, b); got != (i > j) {
				t.Errorf("Worse(%s, %s) = %v, want %v", a, b, got, i > j)
			}
		}
	}
	for _, odd := range []string{"", "healthy", "Broken"} {
		if !Worse(odd, v1alpha1.HealthStatusDegraded) || Worse(odd, v1alpha1.HealthStatusUnknown) || Worse(v1alpha1.HealthStatusUnknown, odd) {
			t.Errorf("%q does not rank as Unknown", odd)
		}
	}
}

func TestAggregate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		codes []string
		want  string
	}{
		{"no resources are healthy", nil, v1alpha1.HealthStatusHealthy},
		{"healthy resources are healthy", []string{"Healthy", "Healthy"}, v1alpha1.HealthStatusHealthy},
		{"a suspended resource makes the whole suspended", []string{"Healthy", "Suspended", "Healthy"}, v1alpha1.HealthStatusSuspended},
		{"progressing is worse than suspended", []string{"Suspended", "Progressing"}, v1alpha1.HealthStatusProgressing},
		{"missing is worse than progressing", []string{"Progressing", "Missing", "Healthy"}, v1alpha1.HealthStatusMissing},
		{"degraded is worse than missing", []string{"Missing", "Degraded", "Progressing"}, v1alpha1.HealthStatusDegraded},
		{"unknown is the worst", []string{"Degraded", "Unknown", "Healthy"}, v1alpha1.HealthStatusUnknown},
		{"order does not matter", []string{"Degraded", "Healthy", "Missing"}, v1alpha1.HealthStatusDegraded},
		{"an unrecognised code counts as Unknown", []string{"Healthy", "Exploded"}, v1alpha1.HealthStatusUnknown},
		{"a never assessed resource counts as Unknown", []string{"Healthy", ""}, v1alpha1.HealthStatusUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Aggregate(tc.codes...); got != tc.want {
				t.Errorf("Aggregate(%q) = %q, want %q", tc.codes, got, tc.want)
			}
		})
	}
}

// TestStatuslessKindsHaveNoStatus checks each kind Statusless lists
// against its Go type in client-go's scheme: no status field at all, and
// an object of it (with a generation, as some API servers set one) is
// Healthy for kstatus and for Assess.
func TestStatuslessKindsHaveNoStatus(t *testing.T) {
	types := map[schema.GroupKind]reflect.Type{}
	for gvk, typ := range scheme.Scheme.AllKnownTypes() {
		if gvk.Version != runtime.APIVersionInternal {
			types[gvk.GroupKind()] = typ
		}
	}
	for key := range statusless {
		gk := schema.GroupKind{Group: key[0], Kind: key[1]}
		t.Run(gk.String(), func(t *testing.T) {
			if !Statusless(gk.Group, gk.Kind) {
				t.Fatalf("Statusless(%q, %q) = false", gk.Group, gk.Kind)
			}
			typ, ok := types[gk]
			if !ok {
				t.Fatalf("%s is not a kind client-go knows", gk)
			}
			if _, has := typ.FieldByName("Status"); has {
				t.Fatalf("%s has a status", gk)
			}
			gvks, _, err := scheme.Scheme.ObjectKinds(reflect.New(typ).Interface().(runtime.Object))
			if err != nil {
				t.Fatal(err)
			}
			obj := reflect.New(typ).Interface().(runtime.Object)
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{Object: m}
			u.SetGroupVersionKind(gvks[0])
			u.SetName("x")
			u.SetGeneration(1)
			if res, err := status.Compute(u); err != nil || res.Status != status.CurrentStatus {
				t.Errorf("kstatus: %v, %v; want Current", res, err)
			}
			if h := Assess(u); h.Status != v1alpha1.HealthStatusHealthy {
				t.Errorf("Assess: %v, want Healthy", h)
			}
		})
	}
}

func TestStatuslessIsFalseForKindsWithStatus(t *testing.T) {
	for _, gk := range [][2]string{
		{"apps", "Deployment"}, {"", "Pod"}, {"", "Service"}, {"batch", "Job"}, {"", "PersistentVolumeClaim"},
		{"apiextensions.k8s.io", "CustomResourceDefinition"}, {"", "Namespace"}, {"networking.k8s.io", "Ingress"},
		{"example.com", "ConfigMap"}, {"", "Role"},
	} {
		if Statusless(gk[0], gk[1]) {
			t.Errorf("Statusless(%q, %q) = true", gk[0], gk[1])
		}
	}
}

// MayWait: a sync needs to read back only what can be unhealthy once it
// exists.
func TestMayWait(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want bool
	}{
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", false},
		{"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{port: 80}]}\n", false},
		{"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {type: NodePort}\n", false},
		{"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {type: LoadBalancer}\n", true},
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n", true},
		{"apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: a}\n", true},
	} {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(tc.yaml), &u.Object); err != nil {
			t.Fatal(err)
		}
		if got := MayWait(u); got != tc.want {
			t.Errorf("MayWait(%s) = %v, want %v", strings.ReplaceAll(tc.yaml, "\n", " "), got, tc.want)
		}
	}
}
