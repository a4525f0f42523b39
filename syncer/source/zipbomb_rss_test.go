package source

import (
	"context"
	"fmt"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"

	"deputy.dev/deputy/policy/v1alpha1"
)

// TestZipBombRSS measures deputy's peak RSS (VmHWM) when a repository holds
// a 1 GiB file of zeros (about 1 MB compressed) outside spec.source.path:
// once as deputy fetched before issue 11 (go-git's mirror clone, no
// budget), once with the sync engine's bounded fetch and the default
// limits, and once doing nothing (the test binary's own footprint). Each
// runs in a fresh process. It takes about a minute and is
// skipped unless DEPUTY_ZIPBOMB_RSS=1 (the figures are in
// docs/benchmarks.md):
//
//	DEPUTY_ZIPBOMB_RSS=1 go test -run TestZipBombRSS -v ./syncer/source/
func TestZipBombRSS(t *testing.T) {
	if os.Getenv("DEPUTY_ZIPBOMB_RSS") != "1" {
		t.Skip("set DEPUTY_ZIPBOMB_RSS=1 to measure (about a minute)")
	}
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("needs git")
	}
	root := t.TempDir()
	bare := filepath.Join(root, "bomb.git")
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = bare
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.MkdirAll(bare, 0o755); err != nil {
		t.Fatal(err)
	}
	run("", "init", "-q", "--bare")
	// dd if=/dev/zero bs=1M count=1024 | git hash-object -w --stdin
	dd := exec.Command("sh", "-c", "dd if=/dev/zero bs=1M count=1024 2>/dev/null | git hash-object -w --stdin")
	dd.Dir = bare
	out, err := dd.Output()
	if err != nil {
		t.Fatal(err)
	}
	blob := strings.TrimSpace(string(out))
	cm := run(configMapYAML("small"), "hash-object", "-w", "--stdin")
	app := run("100644 blob "+cm+"\tcm.yaml\n", "mktree")
	big := run("100644 blob "+blob+"\tzeros\n", "mktree")
	tree := run("040000 tree "+app+"\tapp\n040000 tree "+big+"\tbig\n", "mktree")
	commit := run("", "commit-tree", tree, "-m", "bomb")
	run("", "update-ref", "refs/heads/master", commit)
	run("", "symbolic-ref", "HEAD", "refs/heads/master")
	run("", "repack", "-a", "-d", "-q")

	srv := httptest.NewServer(&cgi.Handler{Path: gitBin, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}})
	defer srv.Close()
	for _, mode := range []string{"idle", "before", "after"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestZipBombRSSChild$", "-test.v")
		cmd.Env = append(os.Environ(), "DEPUTY_ZIPBOMB_CHILD="+mode, "DEPUTY_ZIPBOMB_URL="+srv.URL+"/bomb.git")
		out, err := cmd.CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "RESULT") {
				t.Log(strings.TrimSpace(line))
			}
		}
		if err != nil {
			t.Errorf("%s: %v\n%s", mode, err, out)
		}
	}
}

// TestZipBombRSSChild is TestZipBombRSS's measured process.
func TestZipBombRSSChild(t *testing.T) {
	mode, url := os.Getenv("DEPUTY_ZIPBOMB_CHILD"), os.Getenv("DEPUTY_ZIPBOMB_URL")
	if mode == "" {
		t.Skip("run by TestZipBombRSS")
	}
	var err error
	switch mode {
	case "idle":
		// The test process itself, for reference: no fetch.
	case "before":
		// deputy's fetch before issue 11: go-git's default HTTP client.
		_, err = git.PlainCloneContext(context.Background(), t.TempDir(), true, &git.CloneOptions{URL: url, Mirror: true})
	case "after":
		c := &Cache{dir: t.TempDir(), limits: DefaultLimits()}
		_, err = c.Render(context.Background(), v1alpha1.ApplicationSource{RepoURL: url, Path: "app"}, "")
	}
	status, _ := os.ReadFile("/proc/self/status")
	hwm := ""
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			hwm = strings.Join(strings.Fields(strings.TrimPrefix(l, "VmHWM:")), " ")
		}
	}
	fmt.Printf("RESULT %s: VmHWM %s, error: %v\n", mode, hwm, err)
}
