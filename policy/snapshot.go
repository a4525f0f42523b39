package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Snapshot is an immutable, indexed view of all policy at one point in time.
// Readers hold a *Snapshot for the duration of one decision; sources replace
// the whole value atomically, never mutate it.
type Snapshot struct {
	// RBAC is the subject-indexed RBAC view.
	RBAC *RBAC
	// Projects are the AppProjects of both groups, in load order.
	Projects []Project
	// Applications are the deputy.dev Applications, in load order (file
	// mode; look one up with Application).
	Applications []Application
	// Tokens is the static token set (nil when there is none).
	Tokens *TokenSet
	// Resources is the built-in resources plus the CustomResourceDefinitions
	// of the policy files: the impersonation gate's resource catalog in file
	// mode.
	Resources *ResourceCatalog
	// Files are the files the snapshot was built from.
	Files []string
	// FileObjects counts the objects (and tokens) each file contributed.
	FileObjects map[string]int
	// Digest identifies the input bytes (hex SHA-256 over names and contents).
	Digest string
	// LoadedAt is when the snapshot was built.
	LoadedAt time.Time

	applications map[string]*Application // namespace/name -> Applications entry
}

// Build indexes decoded objects into a Snapshot. aggregate says whether
// ClusterRole aggregationRules are to be computed here (file mode) or were
// already applied by the cluster's controller-manager (cluster mode).
//
// Errors: an invalid aggregation selector, a duplicate token.
func Build(objs *Objects, aggregate bool) (*Snapshot, error) {
	rbac, err := NewRBAC(objs.RBAC, aggregate)
	if err != nil {
		return nil, err
	}
	var tokens *TokenSet
	if len(objs.Tokens) > 0 {
		if tokens, err = NewTokenSet(objs.Tokens); err != nil {
			return nil, err
		}
	}
	return &Snapshot{RBAC: rbac, Projects: objs.Projects, Applications: objs.Applications, Tokens: tokens, LoadedAt: time.Now(),
		Resources:    BuiltinResources().Merge(catalogFromCRDs(objs.CRDs)),
		FileObjects:  objs.FileObjects,
		applications: indexApplications(objs.Applications)}, nil
}

// Load decodes files and builds a Snapshot from them: Decode then Build, with
// Files and Digest filled in.
//
// Errors: those of Decode and Build.
func Load(files []SourceFile) (*Snapshot, error) {
	objs, err := Decode(files)
	if err != nil {
		return nil, err
	}
	s, err := Build(objs, true)
	if err != nil {
		return nil, err
	}
	s.Digest = digest(files)
	for _, f := range files {
		s.Files = append(s.Files, f.Name)
	}
	return s, nil
}

func digest(files []SourceFile) string {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s:%d:", len(f.Name), f.Name, len(f.Data))
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TokenSetOf returns s.Tokens, or nil for a nil snapshot.
func (s *Snapshot) TokenSetOf() *TokenSet {
	if s == nil {
		return nil
	}
	return s.Tokens
}

// ErrNotLoaded is returned by readers when no snapshot has been loaded yet.
var ErrNotLoaded = errors.New("policy not loaded yet")
