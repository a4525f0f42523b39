package tokenreview

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// revocationPollInterval is how often the revocation file is checked for a
// change: a revocation takes effect at deputy within about this long.
const revocationPollInterval = time.Second

// RevocationList is the set of revoked project token IDs (jti) read from a
// file: one ID per line, blank lines and '#' comments ignored. Run re-reads
// the file when its content changes; a file that cannot be read keeps the
// last list (revocations are never dropped by a read failure). Safe for
// concurrent use.
type RevocationList struct {
	path string
	ids  atomic.Pointer[revocationSet]
}

type revocationSet struct {
	ids  map[string]struct{}
	data []byte
}

// LoadRevocationList reads path.
//
// Errors: the file cannot be read, naming the field to fix.
func LoadRevocationList(path string) (*RevocationList, error) {
	r := &RevocationList{path: path}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read the project token revocation list (authentication.projectTokens.revocationFile): %w", err)
	}
	set, err := parseRevocations(data)
	if err != nil {
		return nil, err
	}
	r.ids.Store(set)
	return r, nil
}

// parseRevocations reads one or more token IDs per line ('#' starts a
// comment).
//
// Errors: a line longer than 1 MiB (the file is refused as a whole: a
// truncated list would un-revoke the entries after it).
func parseRevocations(data []byte) (*revocationSet, error) {
	set := &revocationSet{ids: map[string]struct{}{}, data: data}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		for _, id := range strings.Fields(line) {
			set.ids[id] = struct{}{}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("the project token revocation list (authentication.projectTokens.revocationFile) cannot be read to its end: %w", err)
	}
	return set, nil
}

// Revoked reports whether jti is on the list.
func (r *RevocationList) Revoked(jti string) bool {
	if r == nil {
		return false
	}
	_, ok := r.ids.Load().ids[jti]
	return ok
}

// Len is the number of revoked IDs.
func (r *RevocationList) Len() int { return len(r.ids.Load().ids) }

// Reload re-reads the file now and reports whether the list changed.
//
// Errors: the file cannot be read; the last list stays in force.
func (r *RevocationList) Reload() (bool, error) {
	data, err := os.ReadFile(r.path)
	if err != nil {
		return false, fmt.Errorf("failed to re-read the project token revocation list (authentication.projectTokens.revocationFile), keeping the last one: %w", err)
	}
	if bytes.Equal(data, r.ids.Load().data) {
		return false, nil
	}
	set, err := parseRevocations(data)
	if err != nil {
		return false, fmt.Errorf("%w; keeping the last list", err)
	}
	r.ids.Store(set)
	return true, nil
}

// Run re-reads the file every second until ctx ends (a read of a small file;
// comparing bytes catches edits within the same mtime and the atomic renames
// of ConfigMap volumes). onReload, if not nil, is called after each reload
// that changed the list or failed (err set; the last list stays), so the
// caller can log it.
func (r *RevocationList) Run(ctx context.Context, onReload func(revoked int, err error)) {
	t := time.NewTicker(revocationPollInterval)
	defer t.Stop()
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := r.Reload()
		if onReload == nil {
			continue
		}
		switch {
		case err != nil && err.Error() != lastErr: // report a failure once, not every second
			lastErr = err.Error()
			onReload(r.Len(), err)
		case err == nil && (changed || lastErr != ""):
			lastErr = ""
			onReload(r.Len(), nil)
		}
	}
}
