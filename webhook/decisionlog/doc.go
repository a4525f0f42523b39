// Package decisionlog writes deputy's decision logs (logging.decisions):
// one JSON line per logged SubjectAccessReview decision, with the request
// ID, the subject (user, groups, uid, the keys of extra), the attributes,
// the decision, its reason and evaluation error, the authorizer that
// decided, the impersonation shape, the policy generation and the time the
// decision took.
//
// It owns the cost on the hot path: the request goroutine only filters
// (Logger.Wants: the mode and the sample rate) and hands an Entry to a
// bounded buffer without blocking; one writer goroutine takes the waiting
// entries every DrainInterval (it is not woken per decision), encodes them
// as JSON lines into a 32 KiB buffer and writes it. When the buffer is full the
// entry is dropped and counted. Close drains the buffer and flushes.
//
// It must not log what an Entry does not hold: never a token, a request
// body or the values of a user's extra (they may hold credential IDs); the
// caller builds Entries from authorization attributes only.
package decisionlog
