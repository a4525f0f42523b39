// Package localrepo opens the local Git repositories an operator allows
// (sync.localRepositories): it classifies a repoURL as local (file:// URL or
// absolute path), finds the allowed directory that holds it, and opens the
// repository with every file access (objects, alternates, .git pointers)
// confined to that directory. It must not fetch, render or know about
// Applications beyond the repoURL it is given: package source does that.
package localrepo
