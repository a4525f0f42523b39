package tokenreview

// HealthCheck is healthCheck for the tests of package tokenreview_test,
// which wait for the JWT authenticators to fetch their issuers' keys.
func (c *Chains) HealthCheck() error { return c.healthCheck() }
