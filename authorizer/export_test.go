package authorizer

// RuleAllows is ruleAllows for the tests of package authorizer_test, which
// compare it rule by rule with kube-apiserver's RBAC evaluation.
var RuleAllows = ruleAllows
