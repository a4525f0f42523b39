package source

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"

	"deputy.dev/deputy/policy/v1alpha1"
)

// A tenant's chart can make Helm recurse without end (a value that `tpl`
// renders itself): Helm's own `helm template` dies of it ("fatal error: out
// of memory", which no recover catches). In deputy the render worker dies,
// never deputy, and the operation fails with the memory limit named, at
// once and cleanly, not with a runtime trace.
func TestARecursiveChartEndsAtTheMemoryLimit(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory fails under the worker's RLIMIT_AS with its own message")
	}
	s := newChartServer(t)
	s.add(&chart.Chart{
		Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "loop", Version: "1.0.0"},
		Raw:       []*chart.File{{Name: "values.yaml", Data: []byte("a: \"{{ tpl .Values.a . }}\"\n")}},
		Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte("x: {{ tpl .Values.a . }}\n")}},
	})
	c := s.chartCache("s3cret")
	c.limits = Limits{MaxRenderMemory: 128 << 20}
	start := time.Now()
	_, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: s.srv.URL, Chart: "loop"}, "")
	var le *LimitError
	if !errors.As(err, &le) || le.Field != FieldMaxRenderMemory || !strings.Contains(err.Error(), "chart loop (newest stable) from "+s.srv.URL) || strings.Contains(err.Error(), "goroutine") {
		t.Fatalf("err = %v, want %s naming the chart, without a runtime trace", err, FieldMaxRenderMemory)
	}
	t.Logf("%v (after %s)", err, time.Since(start).Round(time.Millisecond))
}

// A tenant's repository serves an index.yaml listing a chart in 300,000
// versions (some 50 MB, within maxFetchBytes): the index is read and
// parsed in the render worker, whose memory limit ends it with a clean
// error naming the chart; deputy's process holds none of it.
func TestAHugeIndexEndsAtTheWorkersLimits(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory fails under the worker's RLIMIT_AS with its own message")
	}
	s := newChartServer(t)
	s.open = true
	var b strings.Builder
	b.WriteString("apiVersion: v1\nentries:\n  web:\n")
	for i := range 300000 {
		fmt.Fprintf(&b, "  - {apiVersion: v2, name: web, version: 0.%d.%d, urls: [web-0.%d.%d.tgz], digest: %064x}\n", i/1000, i%1000, i/1000, i%1000, i)
	}
	s.mu.Lock()
	s.files["/index.yaml"] = []byte(b.String())
	s.mu.Unlock()
	c := s.chartCache("s3cret")
	c.limits = Limits{MaxRenderMemory: 64 << 20}
	start := time.Now()
	_, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: s.srv.URL, Chart: "web", TargetRevision: "9.x"}, "")
	var le *LimitError
	if !errors.As(err, &le) || le.Field != FieldMaxRenderMemory || !strings.Contains(err.Error(), "chart web 9.x from "+s.srv.URL) {
		t.Fatalf("err = %v, want %s naming the chart", err, FieldMaxRenderMemory)
	}
	t.Logf("%s of index: %v (after %s)", bytesString(int64(b.Len())), err, time.Since(start).Round(time.Millisecond))
}
