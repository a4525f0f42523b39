package diff

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// contextLines are the unchanged lines around each change of Unified's
// output, as diff -u and kubectl diff show them.
const contextLines = 3

// Unified returns the unified diff (diff -u, as kubectl diff prints it:
// three lines of context, github.com/pmezard/go-difflib) from live to target,
// each rendered as a YAML document with its keys sorted (sigs.k8s.io/yaml),
// under the file labels "live/<name>" and "target/<name>". A nil live is an
// object to create (the diff adds every line), a nil target one to delete
// (the diff removes every line); "" means the two render the same, and so
// does two nils.
//
// Unified compares what it is handed: the caller normalizes both sides
// first (Normalize). A Secret's values never appear in the diff: Unified
// masks them with MaskSecrets itself (masking masked Secrets again changes
// nothing). The error is that of rendering a side as YAML; for a Secret it
// names the side only, never a value.
func Unified(live, target *unstructured.Unstructured, name string) (string, error) {
	secret := IsSecret(live) || IsSecret(target)
	live, target = MaskSecrets(live, target)
	a, err := render(live)
	if err != nil {
		return "", renderError("live", name, secret, err)
	}
	b, err := render(target)
	if err != nil {
		return "", renderError("target", name, secret, err)
	}
	if a == b {
		return "", nil
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A:        lines(a),
		B:        lines(b),
		FromFile: "live/" + name,
		ToFile:   "target/" + name,
		Context:  contextLines,
	})
}

// render is u as a YAML document, "" for nil.
func render(u *unstructured.Unstructured) (string, error) {
	if u == nil {
		return "", nil
	}
	b, err := yaml.Marshal(u.Object)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// renderError is the error of rendering one side of name; for a Secret it
// leaves out the encoder's message, which may quote a value.
func renderError(side, name string, secret bool, err error) error {
	if secret {
		return errors.New("diff: rendering the " + side + " Secret " + name + " as YAML failed")
	}
	return fmt.Errorf("diff: rendering the %s side of %s as YAML: %w", side, name, err)
}

// lines splits s after each newline (difflib.SplitLines would add an empty
// last line); "" has no lines.
func lines(s string) []string {
	out := strings.SplitAfter(s, "\n")
	if out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}
