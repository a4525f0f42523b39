package apps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"deputy.dev/deputy/policy/v1alpha1"
)

// campaign runs client-go's leader election until stopCtx ends: while this
// replica leads, lead runs operations. When stopCtx ends while leading, the
// term drains (still holding the Lease), then the Lease is released and the
// outcome logged.
func (c *Controller) campaign(stopCtx context.Context, lock *reportingLock) error {
	le := c.opts.LeaderElection
	// client-go's elector logs through the context's logger; reportingLock
	// says what matters, once per distinct failure, in deputy's words.
	electCtx, cancelElect := context.WithCancel(klog.NewContext(context.WithoutCancel(stopCtx), logr.Discard()))
	defer cancelElect()
	go func() {
		<-stopCtx.Done()
		c.waitTerm() // drain while still holding the Lease
		cancelElect()
	}()
	c.log.Info("campaigning for the sync Lease", "lease", le.Namespace+"/"+le.Name, "identity", c.identity)
	var elector *leaderelection.LeaderElector
	for electCtx.Err() == nil {
		var err error
		elector, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:          lock,
			LeaseDuration: le.LeaseDuration,
			RenewDeadline: le.RenewDeadline,
			RetryPeriod:   le.RetryPeriod,
			// Released below, where the outcome is known and logged.
			ReleaseOnCancel: false,
			Name:            le.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(leaderCtx context.Context) { c.lead(stopCtx, leaderCtx) },
				OnStoppedLeading: func() {},
				OnNewLeader: func(id string) {
					if id != c.identity {
						c.log.Info("another replica leads syncs", "leader", id)
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("apps: invalid leader election settings: %w", err)
		}
		elector.Run(electCtx)
		c.waitTerm()
		if electCtx.Err() == nil {
			c.log.Warn("lost the sync Lease; running operations were cancelled and are left to the next leader", "identity", c.identity)
		}
	}
	if elector == nil || !elector.IsLeader() {
		c.log.Info("stopped campaigning for the sync Lease", "identity", c.identity)
		return nil
	}
	switch err := c.release(lock.Interface); {
	case err == nil:
		c.log.Info("released the sync Lease; another replica can take over at once", "lease", le.Namespace+"/"+le.Name, "identity", c.identity)
	case errors.Is(err, errNotHolder):
		c.log.Info("stopped campaigning for the sync Lease; another replica holds it", "identity", c.identity)
	default:
		c.log.Warn("failed to release the sync Lease: another replica takes over only when it expires",
			"lease", le.Namespace+"/"+le.Name, "identity", c.identity, "expiresWithin", le.LeaseDuration.String(), "error", err.Error())
	}
	return nil
}

// errNotHolder: the Lease is not (or no longer) this replica's.
var errNotHolder = errors.New("the Lease is not held by this replica")

// release gives the Lease up as client-go's ReleaseOnCancel does (no
// holder, a duration of 1 s), if this replica still holds it, within
// RenewDeadline.
//
// Errors: errNotHolder when another replica holds it (or nobody); the API
// error of the read or the update otherwise.
func (c *Controller) release(lock resourcelock.Interface) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.LeaderElection.RenewDeadline)
	defer cancel()
	for {
		rec, _, err := lock.Get(ctx)
		if apierrors.IsNotFound(err) {
			return errNotHolder
		}
		if err != nil {
			return fmt.Errorf("failed to read the Lease: %w", err)
		}
		if rec.HolderIdentity != c.identity {
			return errNotHolder
		}
		now := metav1.NewTime(time.Now())
		err = lock.Update(ctx, resourcelock.LeaderElectionRecord{
			LeaderTransitions: rec.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now,
		})
		if apierrors.IsConflict(err) && ctx.Err() == nil {
			continue // renewed or taken meanwhile: look again
		}
		if err != nil {
			return fmt.Errorf("failed to update the Lease: %w", err)
		}
		return nil
	}
}

// reportingLock is the Lease lock of leader election, logging its failures
// in deputy's words: the first of each kind (verb and reason) as an error
// naming the fix, repeats at debug level, and the recovery once. client-go
// retries every RetryPeriod and would log each attempt.
type reportingLock struct {
	resourcelock.Interface
	log             *slog.Logger
	namespace, name string

	mu      sync.Mutex
	failing string // the kind of the last failure, "" after a success
}

// Get implements resourcelock.Interface.
func (l *reportingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if apierrors.IsNotFound(err) {
		l.observe(ctx, "get", nil) // not created yet: client-go creates it
	} else {
		l.observe(ctx, "get", err)
	}
	return rec, raw, err
}

// Create implements resourcelock.Interface.
func (l *reportingLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, ler)
	if apierrors.IsAlreadyExists(err) {
		l.observe(ctx, "create", nil) // another replica was first
	} else {
		l.observe(ctx, "create", err)
	}
	return err
}

// Update implements resourcelock.Interface.
func (l *reportingLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, ler)
	if apierrors.IsConflict(err) {
		l.observe(ctx, "update", nil) // another replica wrote it: the election handles it
	} else {
		l.observe(ctx, "update", err)
	}
	return err
}

func (l *reportingLock) observe(ctx context.Context, verb string, err error) {
	if err != nil && (ctx.Err() != nil || errors.Is(err, context.Canceled)) {
		return // stopping
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lease := l.namespace + "/" + l.name
	if err == nil {
		if l.failing != "" {
			l.log.Info("the sync Lease can be read and written again", "lease", lease)
			l.failing = ""
		}
		return
	}
	kind := verb + " " + string(apierrors.ReasonForError(err))
	if kind == l.failing {
		l.log.Debug("the sync Lease still fails", "lease", lease, "verb", verb, "error", err.Error())
		return
	}
	l.failing = kind
	hint := "retrying every retryPeriod"
	switch {
	case verb == "create" && apierrors.IsNotFound(err):
		hint = fmt.Sprintf("namespace %s does not exist: create it, or set sync.leaderElection.leaseNamespace (default: deputy's own namespace, $POD_NAMESPACE)", l.namespace)
	case apierrors.IsForbidden(err):
		hint = fmt.Sprintf("grant deputy's identity get, create and update on leases (coordination.k8s.io) named %s in namespace %s (manifests/base/rbac.yaml, Role deputy)", l.name, l.namespace)
	}
	l.log.Error("cannot "+verb+" the sync Lease; this replica runs no operations until it can (logged again only when the error changes)",
		"lease", lease, "error", err.Error(), "fix", hint)
}

// Run starts the informer and campaigns for the Lease until ctx ends; while
// leading it runs operations. With ApplicationsServed set it does neither
// while the Application CRD is not served: it waits, without a request to
// the Lease, and starts when the CRD appears (and stops campaigning, as on
// ctx's end, when it goes away). When ctx ends while leading, it stops
// taking operations, lets the running ones finish for up to ShutdownGrace
// (longer ones are cancelled and left to the next leader), then releases
// the Lease so that another replica takes over at once, and logs whether
// the release succeeded. It returns nil after that.
func (c *Controller) Run(ctx context.Context) error {
	le := c.opts.LeaderElection
	inner, err := resourcelock.New(resourcelock.LeasesResourceLock, le.Namespace, le.Name,
		c.kube.CoreV1(), c.kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: c.identity})
	if err != nil {
		return fmt.Errorf("apps: failed to build the Lease lock: %w", err)
	}
	lock := &reportingLock{Interface: inner, log: c.log, namespace: le.Namespace, name: le.Name}
	waiting := false
	for ctx.Err() == nil {
		served, known := c.served()
		if !served {
			if !waiting && known {
				c.log.Info("the deputy.dev Application CRD is not served: not campaigning for the sync Lease until it is (the impersonation gate works without it)",
					"crd", "applications."+v1alpha1.Group)
			}
			waiting = waiting || known
			select {
			case <-ctx.Done():
			case <-c.servedChanged:
			}
			continue
		}
		waiting = false
		if c.informerStarted.CompareAndSwap(false, true) {
			go c.informer.RunWithContext(ctx)
		}
		// One campaign lasts while the CRD is served: its end (or ctx's) is
		// a graceful stop, as on SIGTERM.
		servedCtx, stop := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			for servedCtx.Err() == nil {
				select {
				case <-servedCtx.Done():
				case <-c.servedChanged:
					if served, _ := c.served(); !served {
						c.log.Info("the deputy.dev Application CRD is no longer served: stopping the Application controller")
						stop()
					}
				}
			}
		}()
		err := c.campaign(servedCtx, lock)
		stop()
		<-watched // a change it consumed is seen by served() above
		if err != nil {
			return err
		}
	}
	return nil
}

// ApplicationsServedChanged tells the controller that what
// ControllerOptions.ApplicationsServed reports may have changed. It never
// blocks.
func (c *Controller) ApplicationsServedChanged() {
	select {
	case c.servedChanged <- struct{}{}:
	default:
	}
}

func (c *Controller) served() (served, known bool) {
	if c.opts.ApplicationsServed == nil {
		return true, true
	}
	return c.opts.ApplicationsServed()
}

// knownNotServed reports whether the Application CRD is known not to be
// served (and the informer has not listed Applications).
func (c *Controller) knownNotServed() bool {
	served, known := c.served()
	return known && !served
}

// waitTerm waits until the current leadership term (if any) has drained.
func (c *Controller) waitTerm() {
	c.mu.Lock()
	done := c.termDone
	c.mu.Unlock()
	if done != nil {
		<-done
	}
}

// term is one leadership term, as the status writer sees it.
type term struct {
	leader context.Context // cancelled when the Lease is lost
	mu     sync.Mutex
	drain  context.Context // set on a graceful stop; its end cancels operations
}

// ending reports whether operations are being cancelled because the term
// ends: their states must not be written (the next leader runs them again).
func (t *term) ending() bool {
	if t.leader.Err() != nil {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.drain != nil && t.drain.Err() != nil
}
