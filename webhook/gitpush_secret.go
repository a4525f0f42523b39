package webhook

import (
	"fmt"
	"log/slog"
	"os"
	"sync"

	"deputy.dev/deputy/internal/secretfile"
)

// maxSecretFileBytes bounds a secret file: secrets are short, and a path that
// points at a large file by mistake must not be read into memory per request.
const maxSecretFileBytes = 64 << 10

// secret returns the provider's current secret; false when it is not
// configured or cannot be read.
func (h *GitWebhookHandler) secret(f *secretFile) ([]byte, bool) {
	if f == nil {
		return nil, false
	}
	v, err := f.get()
	return v, err == nil
}

// secretFile is a secret read from a file and re-read when the file changes.
type secretFile struct {
	path string
	log  *slog.Logger

	mu    sync.Mutex
	info  os.FileInfo // of the file last read; nil after an error
	value []byte
	err   error
}

// get returns the secret: the file's content without surrounding white space
// (files usually end with a newline). The file is stat'ed on every call and
// read again only when it is another file (a Kubernetes Secret volume swaps a
// symlink), or its size or modification time changed.
func (s *secretFile) get() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fi, err := os.Stat(s.path)
	if err == nil && s.info != nil && os.SameFile(s.info, fi) && fi.Size() == s.info.Size() && fi.ModTime().Equal(s.info.ModTime()) {
		return s.value, nil
	}
	var v []byte
	if err == nil {
		v, err = readSecret(s.path)
	}
	if err != nil {
		if s.err == nil || s.err.Error() != err.Error() {
			s.log.Error("git webhook secret file cannot be used; its provider rejects every delivery until it is fixed",
				"file", s.path, "error", err.Error())
		}
		s.info, s.value, s.err = nil, nil, err
		return nil, err
	}
	if s.info != nil || s.err != nil {
		s.log.Info("git webhook secret file reloaded", "file", s.path)
	}
	s.info, s.value, s.err = fi, v, nil
	return v, nil
}

// readSecret reads a webhook secret file (internal/secretfile: one handle,
// size cap) and refuses an empty one.
func readSecret(name string) ([]byte, error) {
	v, err := secretfile.ReadTrimmed(name, maxSecretFileBytes)
	if err != nil {
		return nil, err
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("%s is empty: write the webhook secret into it", name)
	}
	return v, nil
}
