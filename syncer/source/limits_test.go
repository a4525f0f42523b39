package source

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"deputy.dev/deputy/policy/v1alpha1"
)

// Each render limit fails the render with an error naming its
// configuration field, for plain manifests and for kustomize alike.
func TestRenderLimits(t *testing.T) {
	r := newTestRepo(t)
	pad := "# " + strings.Repeat("x", 2000) + "\n"
	r.write("big/cm.yaml", pad+configMapYAML("big"))
	for i := range 5 {
		r.write(fmt.Sprintf("many/cm-%d.yaml", i), configMapYAML(fmt.Sprintf("cm-%d", i)))
		r.write(fmt.Sprintf("heavy/cm-%d.yaml", i), strings.Repeat("# padding\n", 60)+configMapYAML(fmt.Sprintf("cm-%d", i)))
	}
	r.write("docs/all.yaml", strings.Repeat(configMapYAML("x")+"---\n", 5))
	r.write("kbig/kustomization.yaml", "resources:\n- cm.yaml\n")
	r.write("kbig/cm.yaml", pad+configMapYAML("big"))
	r.write("kmany/kustomization.yaml", "resources:\n- ../many\n")
	r.write("many/kustomization.yaml", "resources:\n- cm-0.yaml\n- cm-1.yaml\n- cm-2.yaml\n- cm-3.yaml\n- cm-4.yaml\n")
	r.write("plain-many/a.yaml", configMapYAML("a"))
	r.write("kgen/kustomization.yaml", "configMapGenerator:\n"+strings.Repeat("- name: g\n  behavior: create\n  literals: [a=b]\n", 1)+
		"resources:\n- ../many\n")
	r.commit("limits")

	for _, tc := range []struct {
		name, path string
		limits     Limits
		want       string
	}{
		{"a file over maxFileBytes", "big", Limits{MaxFileBytes: 1024}, FieldMaxFileBytes},
		{"a kustomize input over maxFileBytes", "kbig", Limits{MaxFileBytes: 1024}, FieldMaxFileBytes},
		{"more bytes than maxRenderBytes", "heavy", Limits{MaxFileBytes: 1024, MaxRenderBytes: 2048}, FieldMaxRenderBytes},
		{"more files than maxFiles", "many", Limits{MaxFiles: 3}, FieldMaxFiles},
		{"more kustomize inputs than maxFiles", "kmany", Limits{MaxFiles: 3}, FieldMaxFiles},
		{"more documents than maxObjects", "docs", Limits{MaxObjects: 3}, FieldMaxObjects},
		{"more kustomize objects than maxObjects", "kmany", Limits{MaxObjects: 3}, FieldMaxObjects},
		{"generated objects count too", "kgen", Limits{MaxObjects: 5}, FieldMaxObjects},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCache(t)
			c.limits = tc.limits
			out, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: tc.path}, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render = %v, %v; want an error naming %s", out, err, tc.want)
			}
			var le *LimitError
			if !errors.As(err, &le) || le.Field != tc.want {
				t.Errorf("err = %#v, want a *LimitError for %s", err, tc.want)
			}
		})
	}
	t.Run("within the limits everything renders", func(t *testing.T) {
		for _, p := range []string{"big", "many", "docs", "kmany", "kgen", "heavy"} {
			if _, err := testCache(t).Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: r.dir, Path: p}, ""); err != nil {
				t.Errorf("%s: %v", p, err)
			}
		}
	})
}

// zeros writes a file of n zero bytes into the repository's worktree.
func zeros(t *testing.T, r *testRepo, name string, n int64) {
	t.Helper()
	p := filepath.Join(r.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(n); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// Issue 11 item 5: a file of zeros that compresses to almost nothing, even
// outside spec.source.path, must not make the fetch hold it in memory: the
// pack is inspected as it arrives and the fetch fails naming the limit.
func TestFetchLimits(t *testing.T) {
	const big = 48 << 20
	srv := newGitServer(t)
	r, url := srv.repo(t, "bomb")
	r.write("app/cm.yaml", configMapYAML("small"))
	zeros(t, r, "big/zeros", big)
	r.commit("bomb")
	src := v1alpha1.ApplicationSource{RepoURL: url, Path: "app"}

	t.Run("an object over maxFileBytes fails the fetch before go-git indexes it", func(t *testing.T) {
		c := &Cache{dir: t.TempDir(), limits: Limits{MaxFileBytes: 4 << 20}}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := c.Render(t.Context(), src, "")
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), FieldMaxFileBytes) || !strings.Contains(err.Error(), "fetched pack") {
			t.Fatalf("err = %v, want the fetch to fail naming %s", err, FieldMaxFileBytes)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > big/2 {
			t.Errorf("the refused fetch allocated %d MiB (the object is %d MiB)", alloc>>20, big>>20)
		}
		entries, _ := os.ReadDir(filepath.Join(c.dir, "repos"))
		if len(entries) != 0 {
			t.Errorf("a failed clone left %d directories in the cache", len(entries))
		}
	})
	t.Run("more than maxFetchBytes received fails the fetch", func(t *testing.T) {
		c := &Cache{dir: t.TempDir(), limits: Limits{MaxFetchBytes: 4096}}
		if _, err := c.Render(t.Context(), src, ""); err == nil || !strings.Contains(err.Error(), FieldMaxFetchBytes) {
			t.Fatalf("err = %v, want an error naming %s", err, FieldMaxFetchBytes)
		}
	})
	t.Run("objects totalling more than maxFetchBytes fail the fetch", func(t *testing.T) {
		c := &Cache{dir: t.TempDir(), limits: Limits{MaxFetchBytes: 16 << 20, MaxFileBytes: 64 << 20}}
		if _, err := c.Render(t.Context(), src, ""); err == nil || !strings.Contains(err.Error(), FieldMaxFetchBytes) {
			t.Fatalf("err = %v, want an error naming %s", err, FieldMaxFetchBytes)
		}
	})
	t.Run("within the limits the big file outside the path does not matter", func(t *testing.T) {
		c := &Cache{dir: t.TempDir(), limits: Limits{MaxFileBytes: 64 << 20}}
		out, err := c.Render(t.Context(), src, "")
		if err != nil || names(out.Objects)[0] != "ConfigMap/small" {
			t.Fatalf("render = %v, %v", out, err)
		}
		t.Run("and a render that reads it fails on its declared size", func(t *testing.T) {
			c.limits.MaxFileBytes = 64 << 20
			c.limits.MaxRenderBytes = 32 << 20
			r.write("big/kustomization.yaml", "configMapGenerator:\n- name: z\n  files: [zeros]\n")
			r.commit("next")
			_, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: url, Path: "big"}, "")
			if err == nil || !strings.Contains(err.Error(), FieldMaxRenderBytes) {
				t.Fatalf("err = %v", err)
			}
		})
	})
	t.Run("a later fetch is bounded as the first", func(t *testing.T) {
		r2, url2 := srv.repo(t, "later")
		r2.write("app/cm.yaml", configMapYAML("small"))
		r2.commit("small")
		c := &Cache{dir: t.TempDir(), limits: Limits{MaxFileBytes: 4 << 20}}
		if _, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: url2, Path: "app"}, ""); err != nil {
			t.Fatal(err)
		}
		zeros(t, r2, "big/zeros", big)
		r2.commit("bomb")
		if _, err := c.Render(t.Context(), v1alpha1.ApplicationSource{RepoURL: url2, Path: "app"}, ""); err == nil || !strings.Contains(err.Error(), FieldMaxFileBytes) {
			t.Fatalf("err = %v", err)
		}
	})
}
