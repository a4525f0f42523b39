package policy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
)

// tokenHashPrefix marks a token column that holds the SHA-256 of a token
// instead of the token itself: "sha256:" followed by exactly 64 hexadecimal
// digits (either case). This is a deputy extension of kube-apiserver's static
// token file; upstream has no hashed form.
const tokenHashPrefix = "sha256:"

// tokenMaxErrors bounds how many line errors ParseTokenFile reports at once, so
// that a file in the wrong format does not produce an unreadable wall of errors.
const tokenMaxErrors = 20

// tokenEmptyHash is the SHA-256 of the empty token. No entry may carry it:
// upstream skips empty tokens, and a hashed empty token is almost always an
// unset shell variable that was hashed by mistake.
var tokenEmptyHash = sha256.Sum256(nil)

// TokenEntry is one line of a static token file. It never holds the token
// itself: Hash is the SHA-256 of the token, computed at parse time for a plain
// token column or decoded from a "sha256:<hex>" column.
type TokenEntry struct {
	// Hash is the SHA-256 of the token.
	Hash [32]byte
	// User is the user name (column 2).
	User string
	// UID is the user UID (column 3).
	UID string
	// Groups are the groups (column 4, split on ","), nil when the line has
	// only three columns.
	Groups []string
	// Source is "file:line" of the line that defined the entry, used in error
	// messages.
	Source string
}

// ParseTokenFile reads kube-apiserver's static token file format
// (--token-auth-file) from r and returns one entry per non-empty token. source
// names the file in errors and in each entry's Source ("source:line").
//
// The format and its parsing equal upstream
// k8s.io/apiserver/pkg/authentication/token/tokenfile.NewCSV: encoding/csv with
// default settings and a variable number of fields, so blank lines are skipped,
// fields are quoted CSV fields, leading and trailing whitespace is part of the
// field, and there is no comment syntax (a line starting with "#" is a record
// like any other). Each record is token,user,uid[,groups[,ignored...]]; fewer
// than three columns is an error; a record with an empty token is skipped (as
// upstream, which only warns); groups are the fourth column split on "," with
// no trimming (so an empty fourth column is the single group ""). Duplicate
// tokens are not detected here (see NewTokenSet).
//
// Extension: a token column "sha256:<64 hex digits>" stores the SHA-256 of the
// token instead of the token; anything else starting with "sha256:" is an
// error, as is the hash of the empty token.
//
// Errors name source:line and the fix, never the token text. Line errors are
// collected (up to a bound) and returned joined; a CSV syntax error stops
// parsing because the rest of the file cannot be read reliably. On error the
// returned entries are nil.
func ParseTokenFile(source string, r io.Reader) ([]TokenEntry, error) {
	reader := csv.NewReader(r)
	reader.FieldsPerRecord = -1

	var (
		entries []TokenEntry
		errs    []error
	)
	addErr := func(err error) bool {
		errs = append(errs, err)
		if len(errs) >= tokenMaxErrors {
			errs = append(errs, fmt.Errorf("%s: stopped after %d errors", source, tokenMaxErrors))
			return false
		}
		return true
	}
	for {
		record, err := reader.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				// pe.Err is one of encoding/csv's fixed messages; pe.Error()
				// would also be safe, but the fields are never echoed either way.
				errs = append(errs, fmt.Errorf("%s:%d: invalid CSV at column %d: %v; "+
					"a field that contains a comma, a double quote or a line break must be enclosed in double quotes, "+
					"with each double quote inside it doubled", source, pe.Line, pe.Column, pe.Err))
			} else {
				errs = append(errs, fmt.Errorf("failed to read token file %s: %w", source, err))
			}
			break
		}
		line, _ := reader.FieldPos(0)
		at := fmt.Sprintf("%s:%d", source, line)

		if len(record) < 3 {
			if !addErr(fmt.Errorf("%s: token file must have at least 3 columns (token, user name, user uid), found %d; "+
				"write the line as token,user,uid or token,user,uid,\"group1,group2\"", at, len(record))) {
				break
			}
			continue
		}
		if record[0] == "" {
			// Upstream warns and skips the record; an empty token never authenticates.
			continue
		}

		hash, err := tokenHashColumn(record[0])
		if err != nil {
			if !addErr(fmt.Errorf("%s: %w", at, err)) {
				break
			}
			continue
		}
		entry := TokenEntry{Hash: hash, User: record[1], UID: record[2], Source: at}
		if len(record) >= 4 {
			entry.Groups = strings.Split(record[3], ",")
		}
		entries = append(entries, entry)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return entries, nil
}

// tokenHashColumn returns the SHA-256 that a token column stands for. The
// returned error never contains the column's text.
func tokenHashColumn(column string) ([32]byte, error) {
	var hash [32]byte
	hexDigits, hashed := strings.CutPrefix(column, tokenHashPrefix)
	if !hashed {
		return sha256.Sum256([]byte(column)), nil
	}
	const fix = "write " + tokenHashPrefix + " followed by the 64 hexadecimal digits of the token's SHA-256 " +
		"(for example the output of: printf '%s' \"$TOKEN\" | sha256sum), or use the plain token"
	if len(hexDigits) != 2*len(hash) {
		return hash, errors.New("token column starts with \"" + tokenHashPrefix + "\" but is not followed by exactly 64 hexadecimal digits; " + fix)
	}
	// hex.Decode's error names the offending byte; do not pass it on.
	if _, err := hex.Decode(hash[:], []byte(hexDigits)); err != nil {
		return [32]byte{}, errors.New("token column starts with \"" + tokenHashPrefix + "\" but contains a character that is not a hexadecimal digit; " + fix)
	}
	if hash == tokenEmptyHash {
		return [32]byte{}, errors.New("token column is the SHA-256 of the empty token, which must never authenticate; " +
			"hash the real token (an unset shell variable is the usual cause)")
	}
	return hash, nil
}

// TokenSet is an immutable set of static tokens indexed by SHA-256, built by
// NewTokenSet. A nil *TokenSet is valid and empty. It is safe for concurrent
// use; a policy reload builds a new TokenSet and swaps the pointer.
type TokenSet struct {
	byHash map[[32]byte]tokenUser
}

// tokenUser is what a TokenSet stores per token: the hash again (for the
// constant-time comparison) and the user, never the token.
type tokenUser struct {
	hash   [32]byte
	name   string
	uid    string
	groups []string
}

// NewTokenSet indexes entries by hash. It copies what it keeps, so later
// changes to entries do not affect the set.
//
// Upstream tokenfile lets a later duplicate token win with a warning; deputy
// refuses, because two users for one token is a policy mistake: every
// duplicate is reported, naming both Source locations (never the token). An
// entry holding the SHA-256 of the empty token is an error as well. On error
// the returned set is nil.
func NewTokenSet(entries []TokenEntry) (*TokenSet, error) {
	s := &TokenSet{byHash: make(map[[32]byte]tokenUser, len(entries))}
	first := make(map[[32]byte]string, len(entries))
	var errs []error
	for _, e := range entries {
		if e.Hash == tokenEmptyHash {
			errs = append(errs, fmt.Errorf("%s: token is empty (its SHA-256 is that of the empty token); remove the entry", e.Source))
			continue
		}
		if at, dup := first[e.Hash]; dup {
			errs = append(errs, fmt.Errorf("duplicate token at %s and %s: a token must authenticate exactly one user; "+
				"remove one of the entries or give it its own token", at, e.Source))
			continue
		}
		first[e.Hash] = e.Source
		s.byHash[e.Hash] = tokenUser{hash: e.Hash, name: e.User, uid: e.UID, groups: slices.Clone(e.Groups)}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// Lookup returns the user whose token is token, and whether there is one. The
// presented token is hashed with SHA-256 and looked up by hash; the stored and
// computed hashes are then compared with crypto/subtle.ConstantTimeCompare, so
// the time taken does not depend on how much of a token matches. The empty
// token never matches. Each call returns a fresh *user.DefaultInfo (with its own
// Groups slice and no Extra, as upstream tokenfile) that the caller may keep.
func (s *TokenSet) Lookup(token string) (user.Info, bool) {
	if s == nil || len(s.byHash) == 0 || token == "" {
		return nil, false
	}
	hash := sha256.Sum256([]byte(token))
	u, ok := s.byHash[hash]
	if !ok || subtle.ConstantTimeCompare(u.hash[:], hash[:]) != 1 {
		return nil, false
	}
	return &user.DefaultInfo{Name: u.name, UID: u.uid, Groups: slices.Clone(u.groups)}, true
}

// Len returns the number of tokens in the set; 0 for a nil set.
func (s *TokenSet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.byHash)
}
