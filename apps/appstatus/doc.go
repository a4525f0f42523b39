// Package appstatus is what an Application's status says, as pure functions
// of what deputy observed: after an attempt of an operation
// (RecordOutcome: status.health and status.resources from its results, in
// both modes), after a comparison with Git (ApplyComparison: status.sync,
// status.resources, the ComparisonError condition) and for any condition
// (SetCondition). Writing the status is package apps' job.
package appstatus
