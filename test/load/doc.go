// Package load holds the HTTP load tools behind docs/benchmarks.md:
// sarload drives SubjectAccessReviews at an endpoint and reports requests/s
// and latency percentiles; echofloor is the floor to compare deputy with, a
// minimal Go HTTPS handler that only decodes and echoes a SubjectAccessReview;
// svcproxy stands in for deputy's Service (new connections to ready replicas
// only) in rolling.sh, which stops each of two replicas in turn under
// sarload's traffic.
package load
