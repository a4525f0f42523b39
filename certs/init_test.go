package certs

import (
	"bytes"
	"crypto/x509"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	certutil "k8s.io/client-go/util/cert"
)

var allFiles = []string{CACertFile, CAKeyFile, ServingCertFile, ServingKeyFile, ClientCertFile, ClientKeyFile}

func actions(created, kept, reissued []string) map[string]Action {
	m := map[string]Action{}
	for _, n := range created {
		m[n] = ActionCreated
	}
	for _, n := range kept {
		m[n] = ActionKept
	}
	for _, n := range reissued {
		m[n] = ActionReissued
	}
	return m
}

var (
	caFiles      = []string{CACertFile, CAKeyFile}
	servingFiles = []string{ServingCertFile, ServingKeyFile}
	clientFiles  = []string{ClientCertFile, ClientKeyFile}
	leafFiles    = append(append([]string{}, servingFiles...), clientFiles...)
)

func at(t time.Time) func() time.Time { return func() time.Time { return t } }

func mustInit(t *testing.T, dir string, opts InitOptions) InitResult {
	t.Helper()
	res, err := Init(dir, opts)
	if err != nil {
		t.Fatalf("Init(%s): %v", dir, err)
	}
	return res
}

func readAll(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, n := range allFiles {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err == nil {
			out[n] = data
		}
	}
	return out
}

func TestInit(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name string
		// prepare runs against the directory before the Init under test.
		prepare func(t *testing.T, dir string)
		opts    InitOptions
		// want is each file's action; nil when an error is expected.
		want map[string]Action
		// wantChanged lists files whose bytes must differ from before; every
		// other existing file must be byte-identical.
		wantChanged  []string
		wantCAChange bool
		wantErr      []string
	}{
		{
			name: "a fresh directory gets all six files",
			want: actions(allFiles, nil, nil), wantCAChange: true,
		},
		{
			name:    "a second run keeps every file byte for byte",
			prepare: func(t *testing.T, dir string) { mustInit(t, dir, InitOptions{}) },
			want:    actions(nil, allFiles, nil),
		},
		{
			name:        "--force regenerates everything",
			prepare:     func(t *testing.T, dir string) { mustInit(t, dir, InitOptions{}) },
			opts:        InitOptions{Force: true},
			want:        actions(nil, nil, allFiles),
			wantChanged: allFiles, wantCAChange: true,
		},
		{
			name:        "new hosts reissue only the serving certificate",
			prepare:     func(t *testing.T, dir string) { mustInit(t, dir, InitOptions{}) },
			opts:        InitOptions{Hosts: []string{"deputy.deputy-system.svc", "127.0.0.1"}},
			want:        actions(nil, append(append([]string{}, caFiles...), clientFiles...), servingFiles),
			wantChanged: servingFiles,
		},
		{
			name: "hosts already covered (in another order and case) keep the serving certificate",
			prepare: func(t *testing.T, dir string) {
				mustInit(t, dir, InitOptions{Hosts: []string{"a.example", "10.0.0.1", "b.example"}})
			},
			opts: InitOptions{Hosts: []string{" 10.0.0.1", "B.example", ""}},
			want: actions(nil, allFiles, nil),
		},
		{
			name:        "expired leaves are reissued under the kept CA",
			prepare:     func(t *testing.T, dir string) { mustInit(t, dir, InitOptions{now: at(now.Add(-400 * 24 * time.Hour))}) },
			want:        actions(nil, caFiles, leafFiles),
			wantChanged: leafFiles,
		},
		{
			name:        "leaves expiring within 30 days are reissued",
			prepare:     func(t *testing.T, dir string) { mustInit(t, dir, InitOptions{now: at(now.Add(-340 * 24 * time.Hour))}) },
			want:        actions(nil, caFiles, leafFiles),
			wantChanged: leafFiles,
		},
		{
			name: "short-lived leaves are renewed at two thirds of their life, not on every run",
			prepare: func(t *testing.T, dir string) {
				mustInit(t, dir, InitOptions{LeafValidity: 24 * time.Hour, now: at(now.Add(-time.Hour))})
			},
			opts: InitOptions{LeafValidity: 24 * time.Hour},
			want: actions(nil, allFiles, nil),
		},
		{
			name: "an expired CA is regenerated with both leaves",
			prepare: func(t *testing.T, dir string) {
				mustInit(t, dir, InitOptions{CAValidity: 48 * time.Hour, now: at(now.Add(-72 * time.Hour))})
			},
			want:        actions(nil, nil, allFiles),
			wantChanged: allFiles, wantCAChange: true,
		},
		{
			name: "a lost serving key reissues the serving pair",
			prepare: func(t *testing.T, dir string) {
				mustInit(t, dir, InitOptions{})
				rm(t, dir, ServingKeyFile)
			},
			want:        map[string]Action{CACertFile: ActionKept, CAKeyFile: ActionKept, ServingCertFile: ActionReissued, ServingKeyFile: ActionCreated, ClientCertFile: ActionKept, ClientKeyFile: ActionKept},
			wantChanged: []string{ServingCertFile},
		},
		{
			name: "leaves signed by a removed CA are reissued under the new one",
			prepare: func(t *testing.T, dir string) {
				mustInit(t, dir, InitOptions{})
				rm(t, dir, CACertFile, CAKeyFile)
			},
			want:        actions(caFiles, nil, leafFiles),
			wantChanged: leafFiles, wantCAChange: true,
		},
		{
			name: "leaves from a foreign CA are reissued",
			prepare: func(t *testing.T, dir string) {
				mustInit(t, dir, InitOptions{})
				other := t.TempDir()
				mustInit(t, other, InitOptions{})
				for _, n := range caFiles {
					copyFile(t, filepath.Join(other, n), filepath.Join(dir, n))
				}
			},
			want:        actions(nil, caFiles, leafFiles),
			wantChanged: leafFiles,
		},
		{
			name: "a corrupt certificate is an error naming the file and --force, and is not touched",
			prepare: func(t *testing.T, dir string) {
				mustInit(t, dir, InitOptions{})
				write(t, dir, ServingCertFile, "garbage")
			},
			wantErr: []string{ServingCertFile, "cannot be parsed", "remove it to have it reissued", "--force"},
		},
		{
			name: "every corrupt file is reported at once",
			prepare: func(t *testing.T, dir string) {
				mustInit(t, dir, InitOptions{})
				write(t, dir, CAKeyFile, "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")
				write(t, dir, ClientCertFile, "")
			},
			wantErr: []string{CAKeyFile, "restore it from a backup", ClientCertFile, "--force"},
		},
		{
			name: "--force replaces corrupt files",
			prepare: func(t *testing.T, dir string) {
				mustInit(t, dir, InitOptions{})
				write(t, dir, CACertFile, "garbage")
			},
			opts:        InitOptions{Force: true},
			want:        actions(nil, nil, allFiles),
			wantChanged: allFiles, wantCAChange: true,
		},
		{
			name: "a CA certificate without its key is an error",
			prepare: func(t *testing.T, dir string) {
				mustInit(t, dir, InitOptions{})
				rm(t, dir, CAKeyFile)
			},
			wantErr: []string{CAKeyFile, "is missing", "--force"},
		},
		{
			name: "a CA key without its certificate is an error",
			prepare: func(t *testing.T, dir string) {
				mustInit(t, dir, InitOptions{})
				rm(t, dir, CACertFile)
			},
			wantErr: []string{CACertFile, "is missing", "--force"},
		},
		{
			name: "a CA key from another CA is an error",
			prepare: func(t *testing.T, dir string) {
				mustInit(t, dir, InitOptions{})
				other := t.TempDir()
				mustInit(t, other, InitOptions{})
				copyFile(t, filepath.Join(other, CAKeyFile), filepath.Join(dir, CAKeyFile))
			},
			wantErr: []string{CAKeyFile, "does not belong to", "--force"},
		},
		{
			name: "a leaf certificate in place of the CA is an error",
			prepare: func(t *testing.T, dir string) {
				mustInit(t, dir, InitOptions{})
				copyFile(t, filepath.Join(dir, ServingCertFile), filepath.Join(dir, CACertFile))
				copyFile(t, filepath.Join(dir, ServingKeyFile), filepath.Join(dir, CAKeyFile))
			},
			wantErr: []string{CACertFile, "not a CA", "--force"},
		},
		{
			name:    "a host that is neither an IP nor a DNS name is an error",
			opts:    InitOptions{Hosts: []string{"deputy_svc", "https://x"}},
			wantErr: []string{`"deputy_svc"`, `"https://x"`, "neither an IP address nor a valid DNS name"},
		},
		{
			name:    "negative validity is an error",
			opts:    InitOptions{LeafValidity: -time.Hour},
			wantErr: []string{"must not be negative"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "certs")
			if tt.prepare != nil {
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				tt.prepare(t, dir)
			}
			before := readAll(t, dir)

			res, err := Init(dir, tt.opts)

			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Init succeeded with %+v, want an error containing %q", res, tt.wantErr)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				if diff := cmp.Diff(before, readAll(t, dir)); diff != "" {
					t.Errorf("files changed although Init failed (-before +after):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Init: %v", err)
			}
			got := map[string]Action{}
			for _, f := range res.Files {
				got[f.Name] = f.Action
				if f.Path != filepath.Join(dir, f.Name) {
					t.Errorf("%s: Path = %q, want it under %q", f.Name, f.Path, dir)
				}
				if f.Action == ActionReissued && f.Reason == "" {
					t.Errorf("%s reissued without a reason", f.Name)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("actions (-want +got):\n%s", diff)
			}
			if res.CAChanged != tt.wantCAChange {
				t.Errorf("CAChanged = %v, want %v", res.CAChanged, tt.wantCAChange)
			}
			if res.Changed() != (len(tt.wantChanged) > 0 || len(before) == 0) {
				t.Errorf("Changed() = %v with actions %v", res.Changed(), got)
			}
			after := readAll(t, dir)
			changed := map[string]bool{}
			for _, n := range tt.wantChanged {
				changed[n] = true
			}
			for n, old := range before {
				if same := bytes.Equal(old, after[n]); same == changed[n] {
					t.Errorf("%s: byte-identical = %v, want %v", n, same, !changed[n])
				}
			}
			checkFiles(t, dir, tt.opts.Hosts)
		})
	}
}

// checkFiles asserts the invariants of a successful Init: modes, no leftover
// temporary files, and certificates that verify for their purpose.
func checkFiles(t *testing.T, dir string, hosts []string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(allFiles) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want exactly %v (no temporary files)", names, allFiles)
	}
	for _, n := range allFiles {
		info, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		want := fs.FileMode(0o644)
		if strings.HasSuffix(n, ".key") {
			want = 0o600
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", n, info.Mode().Perm(), want)
		}
	}

	ca := parseCert(t, filepath.Join(dir, CACertFile))
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	client := parseCert(t, filepath.Join(dir, ClientCertFile))
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate does not verify for client auth: %v", err)
	}
	if client.Subject.CommonName != ClientCommonName {
		t.Errorf("client CN = %q, want %q", client.Subject.CommonName, ClientCommonName)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Errorf("client certificate verifies for server auth; it must be client-only")
	}
	serving := parseCert(t, filepath.Join(dir, ServingCertFile))
	if len(hosts) == 0 {
		hosts = DefaultHosts
	}
	for _, h := range hosts {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: h, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate does not verify for host %q: %v", h, err)
		}
	}
	if _, err := LoadAPIServerClient(dir); err != nil {
		t.Errorf("LoadAPIServerClient: %v", err)
	}
}

func TestInitReportsNormalisedHosts(t *testing.T) {
	tests := []struct {
		name  string
		hosts []string
		want  []string
	}{
		{name: "no hosts mean the defaults", want: DefaultHosts},
		{name: "blank entries mean the defaults", hosts: []string{" ", ""}, want: DefaultHosts},
		{name: "hosts are trimmed, lower-cased, canonical and unique", hosts: []string{" Deputy.Example ", "::0001", "deputy.example", "*.svc.example"}, want: []string{"deputy.example", "::1", "*.svc.example"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := mustInit(t, t.TempDir(), InitOptions{Hosts: tt.hosts})
			if diff := cmp.Diff(tt.want, res.Hosts); diff != "" {
				t.Errorf("Hosts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInitCreatesDirectoryPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "certs")
	mustInit(t, dir, InitOptions{})
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o700 {
		t.Errorf("created directory mode %04o, want 0700", info.Mode().Perm())
	}
}

func TestInitRejectsAFileAsDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	write(t, filepath.Dir(file), "f", "x")
	if _, err := Init(file, InitOptions{}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Init on a file: err = %v, want one saying it is not a directory", err)
	}
}

func TestInitWarnsAboutReadableKeys(t *testing.T) {
	dir := t.TempDir()
	mustInit(t, dir, InitOptions{})
	if err := os.Chmod(filepath.Join(dir, CAKeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	res := mustInit(t, dir, InitOptions{})
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], CAKeyFile) || !strings.Contains(res.Warnings[0], "chmod 600") {
		t.Errorf("Warnings = %q, want one naming %s and the fix", res.Warnings, CAKeyFile)
	}
}

func TestInitCapsLeafValidityAtTheCA(t *testing.T) {
	dir := t.TempDir()
	mustInit(t, dir, InitOptions{CAValidity: 100 * 24 * time.Hour})
	ca, leaf := parseCert(t, filepath.Join(dir, CACertFile)), parseCert(t, filepath.Join(dir, ServingCertFile))
	if leaf.NotAfter.After(ca.NotAfter) {
		t.Errorf("serving certificate expires %s, after its CA (%s)", leaf.NotAfter, ca.NotAfter)
	}
}

func TestLoadAPIServerClient(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func(t *testing.T, dir string)
		wantErr  []string
		notExist bool
	}{
		{name: "files written by Init load"},
		{
			name:     "a missing client key wraps fs.ErrNotExist and names the file",
			mutate:   func(t *testing.T, dir string) { rm(t, dir, ClientKeyFile) },
			wantErr:  []string{ClientKeyFile},
			notExist: true,
		},
		{
			name:    "a corrupt CA names the file and --force",
			mutate:  func(t *testing.T, dir string) { write(t, dir, CACertFile, "x") },
			wantErr: []string{CACertFile, "--force"},
		},
		{
			name: "a client certificate from another CA says how to reissue it",
			mutate: func(t *testing.T, dir string) {
				other := t.TempDir()
				mustInit(t, other, InitOptions{})
				copyFile(t, filepath.Join(other, ClientCertFile), filepath.Join(dir, ClientCertFile))
				copyFile(t, filepath.Join(other, ClientKeyFile), filepath.Join(dir, ClientKeyFile))
			},
			wantErr: []string{ClientCertFile, "does not verify", "deputy certs init --dir"},
		},
		{
			name: "a mismatched key names both files",
			mutate: func(t *testing.T, dir string) {
				copyFile(t, filepath.Join(dir, ServingKeyFile), filepath.Join(dir, ClientKeyFile))
			},
			wantErr: []string{ClientKeyFile, ClientCertFile, "does not belong"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			mustInit(t, dir, InitOptions{})
			if tt.mutate != nil {
				tt.mutate(t, dir)
			}
			got, err := LoadAPIServerClient(dir)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("LoadAPIServerClient: %v", err)
				}
				files := readAll(t, dir)
				if !bytes.Equal(got.CA, files[CACertFile]) || !bytes.Equal(got.Cert, files[ClientCertFile]) || !bytes.Equal(got.Key, files[ClientKeyFile]) {
					t.Errorf("LoadAPIServerClient returned other bytes than the files hold")
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadAPIServerClient succeeded, want an error containing %q", tt.wantErr)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if errors.Is(err, fs.ErrNotExist) != tt.notExist {
				t.Errorf("errors.Is(err, fs.ErrNotExist) = %v, want %v", !tt.notExist, tt.notExist)
			}
		})
	}
}

func parseCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := certutil.ParseCertsPEM(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return certs[0]
}

func rm(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := WriteFileAtomic(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(to)
	mode := fs.FileMode(0o600)
	if err == nil {
		mode = info.Mode().Perm()
	}
	if err := WriteFileAtomic(to, data, mode); err != nil {
		t.Fatal(err)
	}
}
