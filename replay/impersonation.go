package replay

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// The impersonation checks of kube-apiserver 1.37, rebuilt from
// k8s.io/apiserver v0.37.2 pkg/endpoints/filters/impersonation (mode.go,
// constrained_impersonation.go). That package is internal to the filter
// (its modes are unexported and call the authorizer themselves), so the
// checks are written out here, in its order and with its attributes;
// kube-apiserver's caches of successful checks change no outcome and are
// left out.

// manyChecks is upstream's manyAuthorizationChecksInLoop: from this many
// groups or extra values, constrained modes first try one wildcard check.
const manyChecks = 4

// associatedNodeKeys is the extra key the associated-node mode shows the
// authorizer instead of the requestor's extra values.
const associatedNodeKeys = "authentication.kubernetes.io/associated-node-keys"

// checker runs checks through a Decider, remembering what the outcome needs.
type checker struct {
	ctx context.Context
	d   Decider
	out *Outcome
}

// check decides a; on denial it returns a description of the check and the
// reason.
func (c *checker) check(a authorizer.Attributes) (ok bool, denied string) {
	dec := c.d.Decide(c.ctx, a)
	c.out.note(dec)
	if dec.Allowed {
		return true, ""
	}
	return false, describeCheck(a) + ": " + dec.Reason
}

// describeCheck names a check for the report: verb, resource or path, name.
func describeCheck(a authorizer.Attributes) string {
	if !a.IsResourceRequest() {
		return a.GetVerb() + " " + a.GetPath()
	}
	s := a.GetVerb() + " " + resourceString(a.GetAPIGroup(), a.GetResource(), a.GetSubresource())
	if a.GetNamespace() != "" {
		s += " in " + a.GetNamespace()
	}
	if a.GetName() != "" {
		s += " named " + a.GetName()
	}
	return s
}

func resourceString(group, resource, sub string) string {
	s := resource
	if group != "" {
		s += "." + group
	}
	if sub != "" {
		s += "/" + sub
	}
	return s
}

// impersonate decides whether requestor may make request (its attributes,
// with requestor as user) while impersonating wanted: every mode in
// upstream's order (associated-node, arbitrary-node, serviceaccount,
// user-info, then legacy), the first that allows wins. denied describes, for
// each mode tried, its failing check when none allows (kube-apiserver's
// error names only the first).
func (c *checker) impersonate(wanted *user.DefaultInfo, request authorizer.AttributesRecord) (ok bool, denied string) {
	requestor := request.User
	onlyName := wanted.UID == "" && len(wanted.Groups) == 0 && len(wanted.Extra) == 0
	nodeName, isNode := nodeUsername(wanted.Name)
	_, _, isSA := saUsername(wanted.Name)
	modes := []struct {
		mode    string
		applies bool
	}{
		{"associated-node", onlyName && isNode && associatedWith(requestor, nodeName)},
		{"arbitrary-node", onlyName && isNode},
		{"serviceaccount", onlyName && isSA},
		{"user-info", !isNode && !isSA},
	}
	var failures []string
	fail := func(mode, d string) { failures = append(failures, mode+": "+d) }
	for _, m := range modes {
		if !m.applies {
			continue
		}
		req := request
		if m.mode == "associated-node" {
			req.User = associatedNodeRequestor(requestor)
		}
		on := req
		on.Verb = "impersonate-on:" + m.mode + ":" + request.Verb
		if ok, d := c.check(on); !ok {
			fail(m.mode, d)
			continue
		}
		ok, d := c.targets(req.User, "impersonate:"+m.mode, true, m.mode == "associated-node", wanted)
		if ok {
			return true, ""
		}
		fail(m.mode, d)
	}
	ok, d := c.targets(requestor, "impersonate", false, false, wanted)
	if ok {
		return true, ""
	}
	fail("legacy", d)
	return false, "no impersonation mode allows it: " + strings.Join(failures, "; ")
}

// targets is impersonationModeState.check: the checks of the user name
// (users, serviceaccounts, or nodes in constrained modes), uid, groups and
// extra, each in its API group.
func (c *checker) targets(requestor user.Info, verb string, constrained, anyNode bool, wanted *user.DefaultInfo) (bool, string) {
	nameGroup, nameVersion := "", "v1"
	if constrained {
		nameGroup = "authentication.k8s.io"
	}
	attrs := func(group, resource, name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: requestor, Verb: verb, APIGroup: group, APIVersion: nameVersion, Resource: resource, Name: name, ResourceRequest: true}
	}
	forbidden := func(a authorizer.AttributesRecord, msg string) (bool, string) {
		return false, describeCheck(&a) + ": " + msg
	}
	u := attrs(nameGroup, "users", wanted.Name)
	if node, ok := nodeUsername(wanted.Name); constrained && ok {
		u.Resource, u.Name = "nodes", node
		if len(wanted.Groups) != 0 {
			return forbidden(u, fmt.Sprintf("when impersonating a node, cannot impersonate groups %q", wanted.Groups))
		}
	}
	if ns, name, ok := saUsername(wanted.Name); ok {
		u.Resource, u.Namespace, u.Name = "serviceaccounts", ns, name
		if constrained && len(wanted.Groups) != 0 {
			return forbidden(u, fmt.Sprintf("when impersonating a service account, cannot impersonate groups %q", wanted.Groups))
		}
	}
	if anyNode && verb == "impersonate:associated-node" {
		u.Name = "*" // upstream's associatedNodeImpersonationAttributes
	}
	if ok, d := c.check(&u); !ok {
		return false, d
	}
	if wanted.UID != "" {
		a := attrs("authentication.k8s.io", "uids", wanted.UID)
		if ok, d := c.check(&a); !ok {
			return false, d
		}
	}
	if len(wanted.Groups) > 0 {
		g := attrs(nameGroup, "groups", "")
		if constrained && slices.Contains(wanted.Groups, "") {
			return forbidden(g, "impersonating the empty string group is not allowed")
		}
		if constrained && slices.Contains(wanted.Groups, user.SystemPrivilegedGroup) {
			g.Name = user.SystemPrivilegedGroup
			return forbidden(g, "impersonating the system:masters group is not allowed")
		}
		wildcard := false
		if constrained && len(wanted.Groups) >= manyChecks {
			g.Name = "*"
			wildcard, _ = c.check(&g)
		}
		for _, name := range wanted.Groups {
			if wildcard {
				break
			}
			g.Name = name
			if ok, d := c.check(&g); !ok {
				return false, d
			}
		}
	}
	if len(wanted.Extra) > 0 {
		e := attrs("authentication.k8s.io", "userextras", "")
		if constrained {
			if err := validateExtra(wanted.Extra); err != nil {
				return forbidden(e, err.Error())
			}
		}
		if constrained && largeExtra(wanted.Extra) {
			e.Subresource, e.Name = "*", "*"
			if ok, _ := c.check(&e); ok {
				return true, ""
			}
		}
		// Upstream walks the map in Go's random order; the first denial
		// it reports may differ, the outcome does not.
		for _, key := range slices.Sorted(maps.Keys(wanted.Extra)) {
			e.Subresource = key
			for _, v := range wanted.Extra[key] {
				e.Name = v
				if ok, d := c.check(&e); !ok {
					return false, d
				}
			}
		}
	}
	return true, ""
}

// validateExtra is upstream's validateExtra (constrained modes only).
func validateExtra(extra map[string][]string) error {
	fp := field.NewPath("extra", "key")
	for key, values := range extra {
		if len(key) == 0 {
			return fmt.Errorf("impersonating the empty string key in extra is not allowed")
		}
		if err := utilvalidation.IsDomainPrefixedPath(fp, key).ToAggregate(); err != nil {
			return fmt.Errorf("impersonating an invalid key in extra is not allowed: %w", err)
		}
		if key != strings.ToLower(key) {
			return fmt.Errorf("impersonating a non-lowercase key in extra is not allowed: %q", key)
		}
		if len(values) == 0 {
			return fmt.Errorf("impersonating empty values in extra is not allowed")
		}
		if slices.Contains(values, "") {
			return fmt.Errorf("impersonating the empty string value in extra is not allowed")
		}
	}
	return nil
}

func largeExtra(extra map[string][]string) bool {
	if len(extra) >= manyChecks {
		return true
	}
	n := 0
	for _, v := range extra {
		n += len(v)
	}
	return n >= manyChecks
}

func saUsername(name string) (ns, sa string, ok bool) {
	ns, sa, err := serviceaccount.SplitUsername(name)
	return ns, sa, err == nil
}

// nodeUsername is upstream's isNodeUsername.
func nodeUsername(name string) (string, bool) {
	node, ok := strings.CutPrefix(name, "system:node:")
	if !ok || len(validation.NameIsDNSSubdomain(node, false)) != 0 {
		return "", false
	}
	return node, true
}

// associatedWith is upstream's requesterAssociatedWithRequestedNodeUsername.
func associatedWith(requestor user.Info, node string) bool {
	if _, _, ok := saUsername(requestor.GetName()); !ok {
		return false
	}
	v := requestor.GetExtra()[serviceaccount.NodeNameKey]
	return len(v) == 1 && v[0] == node
}

// associatedNodeRequestor is the requestor as the associated-node mode shows
// it to the authorizer: its extra replaced by the sorted list of its keys.
func associatedNodeRequestor(u user.Info) user.Info {
	return &user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(),
		Extra: map[string][]string{associatedNodeKeys: sets.StringKeySet(u.GetExtra()).List()}}
}
