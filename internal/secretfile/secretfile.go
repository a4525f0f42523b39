package secretfile

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// MaxBytes is the size cap for PEM material: 1 MiB holds a CA bundle of
// several hundred certificates (a host's whole root store is about 220 KiB)
// while refusing a path that names something else by mistake. Files that
// hold a single short secret use a smaller cap of their own.
const MaxBytes = 1 << 20

// Read returns the content of the file at path, which may be at most limit
// bytes long. The file is read through one handle, so a file replaced while
// it is read (a Secret volume's atomic rename) is read whole, old or new.
//
// Errors: the file cannot be opened (the *fs.PathError of os.Open, so
// errors.Is(err, fs.ErrNotExist) holds for a missing file), cannot be read
// ("failed to read PATH: ..."), or is larger than limit ("PATH is larger than
// LIMIT bytes: it should hold only the secret").
func Read(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("failed to read %s: %w", path, err)
	case int64(len(b)) > limit:
		return nil, fmt.Errorf("%s is larger than %d bytes: it should hold only the secret", path, limit)
	}
	return b, nil
}

// ReadTrimmed is Read with leading and trailing white space (spaces, tabs,
// line breaks) removed. An empty or blank file returns an empty slice and no
// error: what that means is the caller's to say.
//
// Errors: those of Read.
func ReadTrimmed(path string, limit int64) ([]byte, error) {
	b, err := Read(path, limit)
	if err != nil {
		return nil, err
	}
	return bytes.TrimSpace(b), nil
}
