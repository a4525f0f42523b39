package policy_test

import (
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"

	"deputy.dev/deputy/policy"
)

// tokenTestHash is the SHA-256 of token.
func tokenTestHash(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// tokenTestHashColumn is the "sha256:<hex>" token column for token.
func tokenTestHashColumn(token string) string {
	h := tokenTestHash(token)
	return "sha256:" + hex.EncodeToString(h[:])
}

// tokenTestSet parses contents and indexes them, failing the test on error.
func tokenTestSet(t testing.TB, contents string) *policy.TokenSet {
	t.Helper()
	entries, err := policy.ParseTokenFile("tokens.csv", strings.NewReader(contents))
	if err != nil {
		t.Fatalf("ParseTokenFile() error = %v", err)
	}
	set, err := policy.NewTokenSet(entries)
	if err != nil {
		t.Fatalf("NewTokenSet() error = %v", err)
	}
	return set
}

// TestTokenFileUpstreamCases ports k8s.io/apiserver
// pkg/authentication/token/tokenfile/tokenfile_test.go TestTokenFile.
func TestTokenFileUpstreamCases(t *testing.T) {
	set := tokenTestSet(t, `
token1,user1,uid1
token2,user2,uid2
token3,user3,uid3,"group1,group2"
token4,user4,uid4,"group2"
token5,user5,uid5,group5
token6,user6,uid6,group5,otherdata
token7,user7,uid7,"group1,group2",otherdata
`)
	tests := []struct {
		name  string
		token string
		want  *user.DefaultInfo
	}{
		{name: "a three-column line has no groups", token: "token1", want: &user.DefaultInfo{Name: "user1", UID: "uid1"}},
		{name: "another three-column line has no groups", token: "token2", want: &user.DefaultInfo{Name: "user2", UID: "uid2"}},
		{name: "a quoted group column is split on commas", token: "token3", want: &user.DefaultInfo{Name: "user3", UID: "uid3", Groups: []string{"group1", "group2"}}},
		{name: "a quoted single group is one group", token: "token4", want: &user.DefaultInfo{Name: "user4", UID: "uid4", Groups: []string{"group2"}}},
		{name: "an unquoted single group is one group", token: "token5", want: &user.DefaultInfo{Name: "user5", UID: "uid5", Groups: []string{"group5"}}},
		{name: "columns after the groups are ignored", token: "token6", want: &user.DefaultInfo{Name: "user6", UID: "uid6", Groups: []string{"group5"}}},
		{name: "columns after quoted groups are ignored", token: "token7", want: &user.DefaultInfo{Name: "user7", UID: "uid7", Groups: []string{"group1", "group2"}}},
		{name: "an unknown token authenticates nobody", token: "token8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := set.Lookup(tt.token)
			if ok != (tt.want != nil) {
				t.Fatalf("Lookup(%q) ok = %v, want %v", tt.token, ok, tt.want != nil)
			}
			if tt.want == nil {
				if got != nil {
					t.Fatalf("Lookup(%q) = %#v, want nil", tt.token, got)
				}
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Lookup(%q) mismatch (-want +got):\n%s", tt.token, diff)
			}
		})
	}
	if got, want := set.Len(), 7; got != want {
		t.Errorf("Len() = %d, want %d", got, want)
	}
}

// TestParseTokenFile covers the parsing rules of upstream tokenfile.NewCSV
// (TestBadTokenFile, TestInsufficientColumnsTokenFile,
// TestEmptyTokenTokenFile) and deputy's sha256 extension.
func TestParseTokenFile(t *testing.T) {
	hashOfBob := tokenTestHash("bob-token")
	tests := []struct {
		name     string
		contents string
		want     []policy.TokenEntry
	}{
		{
			name:     "an empty file has no entries",
			contents: "",
		},
		{
			name:     "an empty token is skipped like upstream",
			contents: ",user5,uid5\n",
		},
		{
			name:     "blank lines are skipped but still counted in the source line",
			contents: "\n\ntok,alice,1\n",
			want:     []policy.TokenEntry{{Hash: tokenTestHash("tok"), User: "alice", UID: "1", Source: "tokens.csv:3"}},
		},
		{
			name:     "leading and trailing whitespace belongs to the field",
			contents: " tok , alice ,1\n",
			want:     []policy.TokenEntry{{Hash: tokenTestHash(" tok "), User: " alice ", UID: "1", Source: "tokens.csv:1"}},
		},
		{
			name:     "a line starting with a hash sign is a record, not a comment",
			contents: "#tok,alice,1\n",
			want:     []policy.TokenEntry{{Hash: tokenTestHash("#tok"), User: "alice", UID: "1", Source: "tokens.csv:1"}},
		},
		{
			name:     "CRLF line endings are accepted",
			contents: "a,alice,1\r\nb,bob,2\r\n",
			want: []policy.TokenEntry{
				{Hash: tokenTestHash("a"), User: "alice", UID: "1", Source: "tokens.csv:1"},
				{Hash: tokenTestHash("b"), User: "bob", UID: "2", Source: "tokens.csv:2"},
			},
		},
		{
			name:     "a quoted token may contain a comma, a quote and a line break",
			contents: "\"a,\"\"b\nc\",alice,1\nd,bob,2\n",
			want: []policy.TokenEntry{
				{Hash: tokenTestHash("a,\"b\nc"), User: "alice", UID: "1", Source: "tokens.csv:1"},
				{Hash: tokenTestHash("d"), User: "bob", UID: "2", Source: "tokens.csv:3"},
			},
		},
		{
			name:     "an empty group column is the single empty group like upstream",
			contents: "tok,alice,1,\n",
			want:     []policy.TokenEntry{{Hash: tokenTestHash("tok"), User: "alice", UID: "1", Groups: []string{""}, Source: "tokens.csv:1"}},
		},
		{
			name:     "groups are split without trimming or dropping empty names",
			contents: "tok,alice,1,\"a, b,,c\"\n",
			want:     []policy.TokenEntry{{Hash: tokenTestHash("tok"), User: "alice", UID: "1", Groups: []string{"a", " b", "", "c"}, Source: "tokens.csv:1"}},
		},
		{
			name:     "an empty user name and uid are accepted like upstream",
			contents: "tok,,\n",
			want:     []policy.TokenEntry{{Hash: tokenTestHash("tok"), Source: "tokens.csv:1"}},
		},
		{
			name:     "a lower-case sha256 column stores the hash",
			contents: tokenTestHashColumn("bob-token") + ",bob,2,dev\n",
			want:     []policy.TokenEntry{{Hash: hashOfBob, User: "bob", UID: "2", Groups: []string{"dev"}, Source: "tokens.csv:1"}},
		},
		{
			name:     "an upper-case sha256 hex column stores the same hash",
			contents: "sha256:" + strings.ToUpper(hex.EncodeToString(hashOfBob[:])) + ",bob,2\n",
			want:     []policy.TokenEntry{{Hash: hashOfBob, User: "bob", UID: "2", Source: "tokens.csv:1"}},
		},
		{
			name:     "a sha256 column with a leading space is a plain token like upstream whitespace handling",
			contents: " " + tokenTestHashColumn("bob-token") + ",bob,2\n",
			want:     []policy.TokenEntry{{Hash: tokenTestHash(" " + tokenTestHashColumn("bob-token")), User: "bob", UID: "2", Source: "tokens.csv:1"}},
		},
		{
			name:     "an upper-case prefix is a plain token",
			contents: "SHA256:abc,bob,2\n",
			want:     []policy.TokenEntry{{Hash: tokenTestHash("SHA256:abc"), User: "bob", UID: "2", Source: "tokens.csv:1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := policy.ParseTokenFile("tokens.csv", strings.NewReader(tt.contents))
			if err != nil {
				t.Fatalf("ParseTokenFile() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseTokenFile() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// tokenTestSecret is a token that must never show up in an error message; no
// three-character piece of it occurs in deputy's messages.
const tokenTestSecret = "Qz9xK7wVj4"

func TestParseTokenFileErrors(t *testing.T) {
	secretHex := strings.Repeat("Qz9xK7wV", 8) // 64 characters, not hex
	tests := []struct {
		name     string
		contents string
		// secret is the token text in contents that the error must not contain.
		secret string
		want   []string
	}{
		{
			name:     "a line with fewer than three columns names its line and the fix",
			contents: "token1,user1,uid1\ntoken2,user2,uid2\n" + tokenTestSecret + ",user3\n",
			secret:   tokenTestSecret,
			want:     []string{"tokens.csv:3: ", "at least 3 columns (token, user name, user uid), found 2", "token,user,uid"},
		},
		{
			name:     "every short line is reported at once",
			contents: "\ntoken1,user1,uid1\ntoken2,user2,uid2\n" + tokenTestSecret + ",user3\n" + tokenTestSecret + "\n",
			secret:   tokenTestSecret,
			want:     []string{"tokens.csv:4: ", "found 2", "tokens.csv:5: ", "found 1"},
		},
		{
			name:     "a lone token is too few columns",
			contents: tokenTestSecret + "\n",
			secret:   tokenTestSecret,
			want:     []string{"tokens.csv:1: ", "found 1"},
		},
		{
			name:     "a bare quote in a token is a CSV error with the line and column",
			contents: "ok,alice,1\n" + tokenTestSecret + "\"x,user,uid\n",
			secret:   tokenTestSecret,
			want:     []string{"tokens.csv:2: invalid CSV at column 11", "double quotes"},
		},
		{
			name:     "an unterminated quoted token is a CSV error",
			contents: "\"" + tokenTestSecret + ",user,uid\n",
			secret:   tokenTestSecret,
			want:     []string{"tokens.csv:1: invalid CSV", "double quotes"},
		},
		{
			name:     "a short sha256 column is rejected",
			contents: "sha256:" + tokenTestSecret + ",bob,2\n",
			secret:   tokenTestSecret,
			want:     []string{"tokens.csv:1: ", "not followed by exactly 64 hexadecimal digits", "sha256sum"},
		},
		{
			name:     "a sha256 column with one digit too many is rejected",
			contents: tokenTestHashColumn(tokenTestSecret) + "0,bob,2\n",
			secret:   tokenTestHashColumn(tokenTestSecret)[len("sha256:"):],
			want:     []string{"tokens.csv:1: ", "exactly 64 hexadecimal digits"},
		},
		{
			name:     "a sha256 column with non-hex characters is rejected",
			contents: "sha256:" + secretHex + ",bob,2\n",
			secret:   secretHex,
			want:     []string{"tokens.csv:1: ", "not a hexadecimal digit"},
		},
		{
			name:     "the sha256 of the empty token is rejected",
			contents: tokenTestHashColumn("") + ",bob,2\n",
			secret:   tokenTestHashColumn("")[len("sha256:"):],
			want:     []string{"tokens.csv:1: ", "SHA-256 of the empty token", "unset shell variable"},
		},
		{
			name:     "a very broken file stops after a bounded number of errors",
			contents: strings.Repeat(tokenTestSecret+"\n", 100),
			secret:   tokenTestSecret,
			want:     []string{"tokens.csv:20: ", "tokens.csv: stopped after 20 errors"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := policy.ParseTokenFile("tokens.csv", strings.NewReader(tt.contents))
			if err == nil {
				t.Fatalf("ParseTokenFile() = %v, want an error", got)
			}
			if got != nil {
				t.Errorf("ParseTokenFile() entries = %v, want nil on error", got)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("ParseTokenFile() error = %q, want it to contain %q", err, want)
				}
			}
			tokenTestAssertNoSecret(t, err, tt.secret)
		})
	}

	t.Run("a failing reader is reported with the source", func(t *testing.T) {
		boom := errors.New("disk on fire")
		_, err := policy.ParseTokenFile("tokens.csv", iotest.ErrReader(boom))
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "failed to read token file tokens.csv") {
			t.Errorf("ParseTokenFile() error = %v, want it to wrap %v and name the file", err, boom)
		}
	})
}

// tokenTestAssertNoSecret fails when err contains secret or any piece of it of
// three or more characters (which covers every prefix).
func tokenTestAssertNoSecret(t *testing.T, err error, secret string) {
	t.Helper()
	msg := err.Error()
	for i := 0; i+3 <= len(secret); i++ {
		if piece := secret[i : i+3]; strings.Contains(msg, piece) {
			t.Errorf("error %q contains %q, a piece of the token", msg, piece)
			return
		}
	}
}

func TestNewTokenSet(t *testing.T) {
	parse := func(t *testing.T, source, contents string) []policy.TokenEntry {
		t.Helper()
		entries, err := policy.ParseTokenFile(source, strings.NewReader(contents))
		if err != nil {
			t.Fatalf("ParseTokenFile(%s) error = %v", source, err)
		}
		return entries
	}

	t.Run("a duplicate token in one file names both lines", func(t *testing.T) {
		entries := parse(t, "a.csv", "x,alice,1\n"+tokenTestSecret+",bob,2\n"+tokenTestSecret+",carol,3\n")
		set, err := policy.NewTokenSet(entries)
		if err == nil {
			t.Fatalf("NewTokenSet() = %v, want a duplicate error", set)
		}
		if !strings.Contains(err.Error(), "duplicate token at a.csv:2 and a.csv:3") {
			t.Errorf("NewTokenSet() error = %q, want it to name a.csv:2 and a.csv:3", err)
		}
		tokenTestAssertNoSecret(t, err, tokenTestSecret)
	})

	t.Run("a duplicate token across files names both files", func(t *testing.T) {
		entries := append(parse(t, "a.csv", tokenTestSecret+",bob,2\n"), parse(t, "b.csv", "\n"+tokenTestSecret+",bob,2\n")...)
		_, err := policy.NewTokenSet(entries)
		if err == nil || !strings.Contains(err.Error(), "duplicate token at a.csv:1 and b.csv:2") {
			t.Errorf("NewTokenSet() error = %v, want it to name a.csv:1 and b.csv:2", err)
		}
	})

	t.Run("a plain token and its sha256 are duplicates", func(t *testing.T) {
		entries := parse(t, "a.csv", tokenTestSecret+",bob,2\n"+tokenTestHashColumn(tokenTestSecret)+",bob,2\n")
		_, err := policy.NewTokenSet(entries)
		if err == nil || !strings.Contains(err.Error(), "duplicate token at a.csv:1 and a.csv:2") {
			t.Fatalf("NewTokenSet() error = %v, want a duplicate error", err)
		}
		tokenTestAssertNoSecret(t, err, tokenTestSecret)
	})

	t.Run("every duplicate is reported at once", func(t *testing.T) {
		entries := parse(t, "a.csv", "x,alice,1\nx,alice,1\ny,bob,2\ny,bob,2\nx,alice,1\n")
		_, err := policy.NewTokenSet(entries)
		if err == nil {
			t.Fatal("NewTokenSet() error = nil, want duplicate errors")
		}
		for _, want := range []string{"a.csv:1 and a.csv:2", "a.csv:3 and a.csv:4", "a.csv:1 and a.csv:5"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("NewTokenSet() error = %q, want it to contain %q", err, want)
			}
		}
	})

	t.Run("an entry holding the hash of the empty token is rejected", func(t *testing.T) {
		_, err := policy.NewTokenSet([]policy.TokenEntry{{Hash: tokenTestHash(""), User: "alice", Source: "api:1"}})
		if err == nil || !strings.Contains(err.Error(), "api:1: token is empty") {
			t.Errorf("NewTokenSet() error = %v, want an empty token error naming api:1", err)
		}
	})

	t.Run("the set does not share memory with its entries or its results", func(t *testing.T) {
		entries := parse(t, "a.csv", "tok,alice,1,\"dev,ops\"\n")
		set, err := policy.NewTokenSet(entries)
		if err != nil {
			t.Fatalf("NewTokenSet() error = %v", err)
		}
		entries[0].Groups[0] = "changed-entry"
		first, _ := set.Lookup("tok")
		first.GetGroups()[1] = "changed-result"
		second, ok := set.Lookup("tok")
		if !ok {
			t.Fatal("Lookup(tok) ok = false, want true")
		}
		if diff := cmp.Diff([]string{"dev", "ops"}, second.GetGroups()); diff != "" {
			t.Errorf("Lookup(tok).GetGroups() mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestTokenSetLookup(t *testing.T) {
	set := tokenTestSet(t, "alice-token,alice,1\n"+tokenTestHashColumn("bob-token")+",bob,2,\"dev,ops\"\n")
	tests := []struct {
		name  string
		set   *policy.TokenSet
		token string
		want  user.Info
	}{
		{name: "a plain token finds its user", set: set, token: "alice-token", want: &user.DefaultInfo{Name: "alice", UID: "1"}},
		{name: "a token stored as sha256 finds its user", set: set, token: "bob-token", want: &user.DefaultInfo{Name: "bob", UID: "2", Groups: []string{"dev", "ops"}}},
		{name: "the sha256 column itself is not a token", set: set, token: tokenTestHashColumn("bob-token")},
		{name: "a prefix of a token finds nobody", set: set, token: "alice-toke"},
		{name: "a token with trailing whitespace finds nobody", set: set, token: "alice-token "},
		{name: "the empty token finds nobody", set: set, token: ""},
		{name: "a nil set finds nobody", token: "alice-token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.set.Lookup(tt.token)
			if ok != (tt.want != nil) {
				t.Fatalf("Lookup(%q) ok = %v, want %v", tt.token, ok, tt.want != nil)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Lookup(%q) mismatch (-want +got):\n%s", tt.token, diff)
			}
		})
	}

	t.Run("a nil set is empty", func(t *testing.T) {
		var nilSet *policy.TokenSet
		if got := nilSet.Len(); got != 0 {
			t.Errorf("Len() = %d, want 0", got)
		}
	})
	t.Run("a set built from no entries is empty", func(t *testing.T) {
		empty, err := policy.NewTokenSet(nil)
		if err != nil {
			t.Fatalf("NewTokenSet(nil) error = %v", err)
		}
		if got := empty.Len(); got != 0 {
			t.Errorf("Len() = %d, want 0", got)
		}
		if _, ok := empty.Lookup("x"); ok {
			t.Error("Lookup(x) ok = true, want false")
		}
	})
}

// tokenTestQuietKlog silences klog, which upstream tokenfile uses to warn
// about empty and duplicate tokens, so that fuzzing is not slowed down by it.
var tokenTestQuietKlog = sync.OnceFunc(func() {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
})

// FuzzParseTokenFile checks that ParseTokenFile never panics, never puts a
// field into an error, and agrees with the upstream reference
// (tokenfile.NewCSV) on every input without deputy's sha256 extension.
func FuzzParseTokenFile(f *testing.F) {
	for _, seed := range []string{
		"",
		"token1,user1,uid1\ntoken3,user3,uid3,\"group1,group2\"\ntoken7,user7,uid7,\"group1,group2\",otherdata\n",
		"SECRETMARK,user3\n",
		"SECRETMARK\n",
		",user5,uid5\n",
		"SECRETMARK\"x,user,uid\n",
		"\"SECRETMARK,user,uid\n",
		"\"a,\"\"b\nSECRETMARK\",alice,1\r\n",
		"SECRETMARK,a,1\nSECRETMARK,b,2\n",
		" SECRETMARK ,a,1,\n#c,d,e,\"x,,y\"\n",
		"sha256:SECRETMARK,bob,2\n",
		tokenTestHashColumn("bob") + ",bob,2\n",
		tokenTestHashColumn("") + ",bob,2\n",
	} {
		f.Add(seed)
	}
	tokenTestQuietKlog()
	f.Fuzz(func(t *testing.T, data string) {
		entries, err := policy.ParseTokenFile("fuzz.csv", strings.NewReader(data))
		if err != nil {
			if entries != nil {
				t.Fatalf("ParseTokenFile() returned entries and error %v", err)
			}
			if strings.Contains(err.Error(), "SECRETMARK") {
				t.Fatalf("ParseTokenFile() error contains a field: %q", err)
			}
		}
		set, setErr := policy.NewTokenSet(entries)
		if setErr != nil && strings.Contains(setErr.Error(), "SECRETMARK") {
			t.Fatalf("NewTokenSet() error contains a field: %q", setErr)
		}
		for _, e := range entries {
			if !strings.HasPrefix(e.Source, "fuzz.csv:") {
				t.Fatalf("entry Source = %q, want fuzz.csv:<line>", e.Source)
			}
		}

		if strings.Contains(data, "sha256:") {
			return // deputy's extension: upstream reads these as plain tokens
		}
		path := filepath.Join(t.TempDir(), "tokens.csv")
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		upstream, upErr := tokenfile.NewCSV(path)
		if (err != nil) != (upErr != nil) {
			t.Fatalf("ParseTokenFile() error = %v, upstream error = %v", err, upErr)
		}
		if err != nil {
			return
		}
		// Upstream lets a later duplicate win; NewTokenSet refuses duplicates,
		// so compare against the entries with the same last-wins rule.
		lastWins := map[[32]byte]policy.TokenEntry{}
		for _, e := range entries {
			lastWins[e.Hash] = e
		}
		if setErr == nil && set.Len() != len(lastWins) {
			t.Fatalf("Len() = %d, want %d distinct tokens", set.Len(), len(lastWins))
		}
		reader := csv.NewReader(strings.NewReader(data))
		reader.FieldsPerRecord = -1
		records, csvErr := reader.ReadAll()
		if csvErr != nil {
			t.Fatalf("csv.ReadAll() error = %v after a successful parse", csvErr)
		}
		for _, record := range records {
			token := record[0]
			resp, upOK, _ := upstream.AuthenticateToken(context.Background(), token)
			e, ok := lastWins[tokenTestHash(token)]
			if ok != upOK {
				t.Fatalf("token %q: deputy found = %v, upstream found = %v", token, ok, upOK)
			}
			if !ok {
				continue
			}
			got := &user.DefaultInfo{Name: e.User, UID: e.UID, Groups: e.Groups}
			if diff := cmp.Diff(resp.User, user.Info(got)); diff != "" {
				t.Fatalf("token %q mismatch (-upstream +deputy):\n%s", token, diff)
			}
			if setErr == nil {
				fromSet, _ := set.Lookup(token)
				if diff := cmp.Diff(resp.User, fromSet); diff != "" {
					t.Fatalf("Lookup(%q) mismatch (-upstream +deputy):\n%s", token, diff)
				}
			}
		}
	})
}
