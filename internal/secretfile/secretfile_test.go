package secretfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name        string
		path        string
		limit       int64
		want        string
		wantTrimmed string
		wantErr     string
		notExist    bool
	}{
		{name: "a file within the limit is read as it is", path: write("ok", " s3cret\n"), limit: 8, want: " s3cret\n", wantTrimmed: "s3cret"},
		{name: "a file of exactly the limit is read", path: write("exact", "12345678"), limit: 8, want: "12345678", wantTrimmed: "12345678"},
		{name: "a blank file is empty once trimmed, without an error", path: write("blank", " \r\n\t"), limit: 8, want: " \r\n\t", wantTrimmed: ""},
		{name: "a file over the limit is refused naming the file and the limit", path: write("big", "123456789"), limit: 8, wantErr: "big is larger than 8 bytes: it should hold only the secret"},
		{name: "a missing file is fs.ErrNotExist", path: filepath.Join(dir, "missing"), limit: 8, wantErr: "no such file", notExist: true},
		{name: "a directory cannot be read", path: dir, limit: 8, wantErr: "failed to read " + dir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(tt.path, tt.limit)
			trimmed, terr := ReadTrimmed(tt.path, tt.limit)
			if tt.wantErr != "" {
				for _, e := range []error{err, terr} {
					if e == nil || !strings.Contains(e.Error(), tt.wantErr) {
						t.Fatalf("error = %v, want it to contain %q", e, tt.wantErr)
					}
					if errors.Is(e, fs.ErrNotExist) != tt.notExist {
						t.Errorf("errors.Is(%v, fs.ErrNotExist) = %v, want %v", e, !tt.notExist, tt.notExist)
					}
				}
				return
			}
			if err != nil || terr != nil {
				t.Fatalf("errors = %v, %v", err, terr)
			}
			if string(got) != tt.want || string(trimmed) != tt.wantTrimmed {
				t.Errorf("Read = %q, ReadTrimmed = %q; want %q, %q", got, trimmed, tt.want, tt.wantTrimmed)
			}
		})
	}
}
