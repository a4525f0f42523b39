// Package gitpush is what a Git push is to deputy and which Application
// sources it moves, as Argo CD decides it (util/webhook): Push (parsed from
// the providers' payloads by the webhook package), RepositoryKey (one key per
// repository however its URL is spelled: https, ssh, scp-like, git://, a
// local path), RevisionMatches (a targetRevision the push moved: the
// branch, the tag, HEAD for the default branch; never a commit SHA), and
// Push.Matches over every source of an Application.
//
// It is pure: it triggers nothing (apps.SyncPush does), does no HTTP and
// reads no configuration.
package gitpush
