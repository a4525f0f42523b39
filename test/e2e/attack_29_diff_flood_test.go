package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"deputy.dev/deputy/policy/v1alpha1"
)

// Issue 16, availability (attack 29), on a cluster-mode replica: a flood of
// diff requests is answered 429 (with Retry-After) beyond the bound, never
// 5xx, and deputy keeps serving; an Application rendering more objects
// than sync.limits.maxObjects is refused with a ComparisonError naming the
// limit, and the replica stays ready.
func TestAttack29DiffFloodAndHugeRenders(t *testing.T) {
	env := setupWaves(t)
	replica := env.startWith(t, "  reconcilePeriod: 10s\n")
	repo := newGitRepo(t)
	var many strings.Builder
	for i := range 300 {
		fmt.Fprintf(&many, "---\n%s", configMap(fmt.Sprintf("a29-%03d", i), "app: a29"))
	}
	repo.write("a29/many.yaml", many.String())
	var huge strings.Builder
	for i := range 10001 {
		fmt.Fprintf(&huge, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a29-huge-%05d}\n", i)
	}
	repo.write("a29-huge/huge.yaml", huge.String())
	repo.commit("a29")
	createWavesApplication(t, wavesApplication("a29", repo.dir, "a29"))
	createWavesApplication(t, wavesApplication("a29-huge", repo.dir, "a29-huge"))

	t.Run("a flood of diffs: 200 or 429 with Retry-After, never 5xx", func(t *testing.T) {
		const n = 40
		codes := make([]int, n)
		retry := make([]string, n)
		cl := apiHTTPClient(t)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, replica.URL+diffPath(wavesAppNS, "a29"), nil)
				req.Header.Set("Authorization", "Bearer "+wavesOperatorToken)
				resp, err := cl.Do(req)
				if err != nil {
					codes[i] = -1
					return
				}
				defer resp.Body.Close()
				codes[i], retry[i] = resp.StatusCode, resp.Header.Get("Retry-After")
			}()
		}
		wg.Wait()
		count := map[int]int{}
		for i, c := range codes {
			count[c]++
			if c == http.StatusTooManyRequests && retry[i] == "" {
				t.Errorf("a 429 without Retry-After")
			}
			if c != http.StatusOK && c != http.StatusTooManyRequests {
				t.Errorf("answer %d", c)
			}
		}
		t.Logf("answers: %v", count)
		if count[http.StatusTooManyRequests] == 0 {
			t.Errorf("%d concurrent diffs all ran: no bound", n)
		}
		if status, body := apiGet(t, replica, wavesOperatorToken, diffPath(wavesAppNS, "a29")); status != http.StatusOK {
			t.Errorf("a diff after the flood: %d %s", status, tail(body, 5))
		}
	})

	t.Run("a render over maxObjects is refused, naming the limit, and deputy stays ready", func(t *testing.T) {
		var msg string
		eventuallyWithin(t, "the huge Application's ComparisonError", 3*driftPeriod, func() error {
			for _, c := range getApplication(t, wavesAppNS, "a29-huge").Status.Conditions {
				if c.Type == v1alpha1.ApplicationConditionComparisonError {
					msg = c.Message
					return nil
				}
			}
			return fmt.Errorf("no ComparisonError yet")
		})
		t.Logf("ComparisonError: %s", tail(msg, 3))
		if !strings.Contains(msg, "maxObjects") {
			t.Errorf("the ComparisonError does not name sync.limits.maxObjects: %s", msg)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := replica.WaitReady(ctx); err != nil {
			t.Errorf("the replica: %v", err)
		}
	})
}
