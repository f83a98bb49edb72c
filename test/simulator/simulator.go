// Package simulator is a test double of Knative Serving's controllers, for
// sluice's local stack. Knative's real controllers need pods and a network
// layer, which the stack's machines cannot run; the simulator plays their
// part against a real kube-apiserver holding Knative's own CRDs:
//
//   - a Service gets a Configuration and a Route of the same name, owned by
//     it; the Route's spec follows the Service's traffic, and a direct edit
//     of that Route is reverted, as Knative does;
//   - a Configuration gets a Revision <config>-0000N on each template change;
//   - a Revision becomes Ready after a delay, or fails (ContainerHealthy=False)
//     or stays not Ready when its template asks (see the Annotation* keys);
//   - a Route's status follows its spec by Knative's rules: percents must sum
//     to 100, and a target that is not Ready freezes the Route's traffic;
//   - a Service's status carries its Route's traffic and readiness.
//
// It is not Knative: users run sluice against a cluster with Knative installed.
package simulator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclient "knative.dev/serving/pkg/client/clientset/versioned"
	informers "knative.dev/serving/pkg/client/informers/externalversions"
)

// Template annotations that steer a simulated Revision.
const (
	// AnnotationReadyAfter delays readiness, e.g. "3s" (default: Simulator.ReadyAfter).
	AnnotationReadyAfter = "sim.sluice.dev/ready-after"
	// AnnotationFail makes the Revision fail with ContainerHealthy=False.
	AnnotationFail = "sim.sluice.dev/fail"
	// AnnotationNeverReady keeps the Revision not Ready forever.
	AnnotationNeverReady = "sim.sluice.dev/never-ready"
	// AnnotationIngressNotReady, on a Service or Route, plays a networking
	// layer that is not ready: the Route's status shows its traffic, but
	// IngressReady and Ready stay Unknown (IngressNotConfigured), as Knative
	// reports while the ingress has not programmed the Route.
	AnnotationIngressNotReady = "sim.sluice.dev/ingress-not-ready"
)

// Simulator reconciles Knative objects in Namespace.
type Simulator struct {
	Serving   servingclient.Interface
	Namespace string
	// ReadyAfter is how long a new Revision takes to become Ready.
	ReadyAfter time.Duration
	Log        *slog.Logger
	// Now is the clock; tests set it.
	Now func() time.Time
	// OnReady, if set, is told when the simulator has written a Revision's
	// Ready status, and when the write returned.
	OnReady func(revision string, at time.Time)
	// Parallel is how many objects one pass writes at once (default 1).
	// Knative's controllers reconcile many keys at once; so must a stand-in
	// that hundreds of rollouts wait on.
	Parallel int

	lists lists
}

// Run reconciles on every change it watches, and every resync interval, until ctx ends.
// It reads from informer caches, so a pass over hundreds of Services costs
// no API-server reads: only the writes that change something reach it.
func (s *Simulator) Run(ctx context.Context, resync time.Duration) error {
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(s.Serving, 0, informers.WithNamespace(s.Namespace))
	v1 := factory.Serving().V1()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
	for _, inf := range []cache.SharedIndexInformer{v1.Services().Informer(), v1.Configurations().Informer(), v1.Revisions().Informer(), v1.Routes().Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("simulator: watch: %w", err)
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("simulator: cache of %v did not sync", typ)
		}
	}
	s.lists = cacheLists{ns: s.Namespace, svc: v1.Services().Lister(), cfg: v1.Configurations().Lister(), rev: v1.Revisions().Lister(), rt: v1.Routes().Lister()}
	tick := time.NewTicker(resync)
	defer tick.Stop()
	for {
		if err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
			s.Log.Debug("simulator reconcile", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-tick.C:
		}
	}
}

// each runs fn for 0..n-1, Parallel at a time, and joins the errors.
func (s *Simulator) each(n int, fn func(int) error) error {
	par := max(s.Parallel, 1)
	errs := make([]error, n)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		if par == 1 {
			errs[i] = fn(i)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s *Simulator) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Reconcile brings every object in the namespace one step closer to what
// Knative's controllers would make of it. It writes only what differs, and
// goes on past an object it cannot write (a conflict is retried on the next
// pass), returning every error.
func (s *Simulator) Reconcile(ctx context.Context) error {
	l := s.lists
	if l == nil {
		l = apiLists{c: s.Serving, ns: s.Namespace}
	}
	var errs []error
	svcs, cfgs, routes, revs, err := readAll(ctx, l)
	if err != nil {
		return err
	}
	cfgByName, routeByName := byName(cfgs), byName(routes)
	errs = append(errs, s.each(len(svcs), func(i int) error { return s.reconcileServiceChildren(ctx, &svcs[i], cfgByName, routeByName) }))
	if cfgs, err = l.configurations(ctx); err != nil {
		return err
	}
	revByName := byName(revs)
	errs = append(errs, s.each(len(cfgs), func(i int) error { return s.reconcileConfiguration(ctx, &cfgs[i], revByName) }))
	if revs, err = l.revisions(ctx); err != nil {
		return err
	}
	errs = append(errs, s.each(len(revs), func(i int) error { return s.reconcileRevision(ctx, &revs[i]) }))
	// Re-read: Revisions and Configurations may have changed above.
	if revs, err = l.revisions(ctx); err != nil {
		return err
	}
	if cfgs, err = l.configurations(ctx); err != nil {
		return err
	}
	errs = append(errs, s.reconcileConfigurationStatus(ctx, cfgs, revs))
	if cfgs, err = l.configurations(ctx); err != nil {
		return err
	}
	if routes, err = l.routes(ctx); err != nil {
		return err
	}
	idx := newRouteIndex(cfgs, revs)
	errs = append(errs, s.each(len(routes), func(i int) error { return s.reconcileRouteStatus(ctx, &routes[i], idx) }))
	if routes, err = l.routes(ctx); err != nil {
		return err
	}
	if svcs, err = l.services(ctx); err != nil {
		return err
	}
	cfgByName, routeByName = byName(cfgs), byName(routes)
	errs = append(errs, s.each(len(svcs), func(i int) error { return s.reconcileServiceStatus(ctx, &svcs[i], cfgByName, routeByName) }))
	return errors.Join(errs...)
}

func owned(svc *servingv1.Service) []metav1.OwnerReference {
	t := true
	return []metav1.OwnerReference{{APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: &t, BlockOwnerDeletion: &t}}
}

// serviceTraffic is a Service's traffic as its Route gets it: unset means
// all traffic to the latest Ready Revision.
func serviceTraffic(svc *servingv1.Service) []servingv1.TrafficTarget {
	if len(svc.Spec.Traffic) == 0 {
		latest, pct := true, int64(100)
		return []servingv1.TrafficTarget{{ConfigurationName: svc.Name, LatestRevision: &latest, Percent: &pct}}
	}
	out := make([]servingv1.TrafficTarget, len(svc.Spec.Traffic))
	for i, t := range svc.Spec.Traffic {
		t = *t.DeepCopy()
		if t.LatestRevision != nil && *t.LatestRevision {
			t.ConfigurationName = svc.Name
		}
		out[i] = t
	}
	return out
}

func (s *Simulator) reconcileServiceChildren(ctx context.Context, svc *servingv1.Service, cfgs map[string]*servingv1.Configuration, routes map[string]*servingv1.Route) error {
	v1 := s.Serving.ServingV1()
	labels := map[string]string{serving.ServiceLabelKey: svc.Name}
	cfg := cfgs[svc.Name]
	switch {
	case cfg == nil:
		cfg = &servingv1.Configuration{
			ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: s.Namespace, Labels: labels, OwnerReferences: owned(svc)},
			Spec:       svc.Spec.ConfigurationSpec,
		}
		if _, err := v1.Configurations(s.Namespace).Create(ctx, cfg, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Configuration %s: %w", svc.Name, err)
		}
	case !equalJSON(cfg.Spec, svc.Spec.ConfigurationSpec):
		cfg.Spec = svc.Spec.ConfigurationSpec
		if _, err := v1.Configurations(s.Namespace).Update(ctx, cfg, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("update Configuration %s: %w", svc.Name, err)
		}
	}
	want := serviceTraffic(svc)
	rt := routes[svc.Name]
	switch {
	case rt == nil:
		rt = &servingv1.Route{
			ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: s.Namespace, Labels: labels, OwnerReferences: owned(svc)},
			Spec:       servingv1.RouteSpec{Traffic: want},
		}
		if _, err := v1.Routes(s.Namespace).Create(ctx, rt, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Route %s: %w", svc.Name, err)
		}
	case !equalJSON(rt.Spec.Traffic, want) || rt.Annotations[AnnotationIngressNotReady] != svc.Annotations[AnnotationIngressNotReady]:
		// The Service owns its Route: a direct edit is reverted.
		rt.Spec.Traffic = want
		if v := svc.Annotations[AnnotationIngressNotReady]; v != "" {
			rt.Annotations = map[string]string{AnnotationIngressNotReady: v}
		} else {
			delete(rt.Annotations, AnnotationIngressNotReady)
		}
		if _, err := v1.Routes(s.Namespace).Update(ctx, rt, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("update Route %s: %w", svc.Name, err)
		}
	}
	return nil
}

// reconcileConfiguration creates the Revision for the Configuration's
// current generation.
func (s *Simulator) reconcileConfiguration(ctx context.Context, cfg *servingv1.Configuration, revs map[string]*servingv1.Revision) error {
	name := fmt.Sprintf("%s-%05d", cfg.Name, cfg.Generation)
	if revs[name] != nil {
		return nil
	}
	labels := map[string]string{
		serving.ConfigurationLabelKey:           cfg.Name,
		serving.ConfigurationGenerationLabelKey: strconv.FormatInt(cfg.Generation, 10),
	}
	if svc := cfg.Labels[serving.ServiceLabelKey]; svc != "" {
		labels[serving.ServiceLabelKey] = svc
	}
	t := true
	rev := &servingv1.Revision{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: s.Namespace, Labels: labels, Annotations: cfg.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "serving.knative.dev/v1", Kind: "Configuration", Name: cfg.Name, UID: cfg.UID, Controller: &t}},
		},
		Spec: cfg.Spec.Template.Spec,
	}
	if _, err := s.Serving.ServingV1().Revisions(s.Namespace).Create(ctx, rev, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Revision %s: %w", name, err)
	}
	return nil
}

// reconcileRevision moves a Revision's readiness along its template's script.
func (s *Simulator) reconcileRevision(ctx context.Context, rev *servingv1.Revision) error {
	want := revisionConditions(rev, s.ReadyAfter, s.now())
	if rev.Status.ObservedGeneration == rev.Generation && equalConditions(rev.Status.Conditions, want) {
		return nil
	}
	rev.Status.ObservedGeneration = rev.Generation
	rev.Status.Conditions = want
	_, err := s.Serving.ServingV1().Revisions(s.Namespace).UpdateStatus(ctx, rev, metav1.UpdateOptions{})
	switch {
	case err == nil && s.OnReady != nil && revisionReady(rev):
		s.OnReady(rev.Name, time.Now())
	case err != nil && !apierrors.IsConflict(err):
		return fmt.Errorf("update Revision %s status: %w", rev.Name, err)
	}
	return nil
}

// revisionConditions are a Revision's conditions at now, by its annotations.
func revisionConditions(rev *servingv1.Revision, readyAfter time.Duration, now time.Time) duckv1.Conditions {
	ann := rev.Annotations
	if d, err := time.ParseDuration(ann[AnnotationReadyAfter]); err == nil {
		readyAfter = d
	}
	age := now.Sub(rev.CreationTimestamp.Time)
	switch {
	case ann[AnnotationFail] == "true" && age >= readyAfter:
		msg := "Container failed with: exit status 1 (simulated by " + AnnotationFail + ")"
		return duckv1.Conditions{
			{Type: servingv1.RevisionConditionContainerHealthy, Status: corev1.ConditionFalse, Reason: "ExitCode1", Message: msg},
			{Type: apis.ConditionReady, Status: corev1.ConditionFalse, Reason: "ExitCode1", Message: msg},
		}
	case ann[AnnotationNeverReady] == "true" || age < readyAfter:
		return duckv1.Conditions{{Type: apis.ConditionReady, Status: corev1.ConditionUnknown, Reason: "Deploying"}}
	}
	return duckv1.Conditions{
		{Type: servingv1.RevisionConditionContainerHealthy, Status: corev1.ConditionTrue},
		{Type: apis.ConditionReady, Status: corev1.ConditionTrue},
	}
}

func revisionReady(r *servingv1.Revision) bool {
	return r.Status.GetCondition(apis.ConditionReady).IsTrue()
}

func (s *Simulator) reconcileConfigurationStatus(ctx context.Context, cfgs []servingv1.Configuration, revs []servingv1.Revision) error {
	byConfig := map[string][]servingv1.Revision{}
	for _, r := range revs {
		c := r.Labels[serving.ConfigurationLabelKey]
		byConfig[c] = append(byConfig[c], r)
	}
	return s.each(len(cfgs), func(i int) error {
		cfg := &cfgs[i]
		created, ready := latestRevisions(cfg.Name, byConfig[cfg.Name])
		st := cfg.Status
		st.ObservedGeneration = cfg.Generation
		st.LatestCreatedRevisionName, st.LatestReadyRevisionName = created, ready
		readyStatus := corev1.ConditionUnknown
		if ready != "" && ready == created {
			readyStatus = corev1.ConditionTrue
		}
		st.Conditions = duckv1.Conditions{{Type: apis.ConditionReady, Status: readyStatus}}
		if equalJSON(st, cfg.Status) {
			return nil
		}
		cfg.Status = st
		if _, err := s.Serving.ServingV1().Configurations(s.Namespace).UpdateStatus(ctx, cfg, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("update Configuration %s status: %w", cfg.Name, err)
		}
		return nil
	})
}

// latestRevisions names a Configuration's newest and newest Ready Revisions.
func latestRevisions(config string, revs []servingv1.Revision) (created, ready string) {
	mine := make([]servingv1.Revision, 0)
	for _, r := range revs {
		if r.Labels[serving.ConfigurationLabelKey] == config {
			mine = append(mine, r)
		}
	}
	gen := func(r servingv1.Revision) int {
		g, _ := strconv.Atoi(r.Labels[serving.ConfigurationGenerationLabelKey])
		return g
	}
	sort.Slice(mine, func(i, j int) bool { return gen(mine[i]) > gen(mine[j]) })
	for _, r := range mine {
		if created == "" {
			created = r.Name
		}
		if ready == "" && revisionReady(&r) {
			ready = r.Name
		}
	}
	return created, ready
}

// routeIndex is what a Route's status depends on, indexed once per pass.
type routeIndex struct {
	exists, ready map[string]bool   // by Revision
	latestReady   map[string]string // by Configuration
}

func newRouteIndex(cfgs []servingv1.Configuration, revs []servingv1.Revision) routeIndex {
	idx := routeIndex{exists: map[string]bool{}, ready: map[string]bool{}, latestReady: map[string]string{}}
	for i := range revs {
		idx.exists[revs[i].Name] = true
		idx.ready[revs[i].Name] = revisionReady(&revs[i])
	}
	for _, c := range cfgs {
		idx.latestReady[c.Name] = c.Status.LatestReadyRevisionName
	}
	return idx
}

// routeStatus is what Knative's Route reconciler reports for a spec: the
// resolved traffic, or — if a target is missing or not Ready, or percents do
// not sum to 100 — the previous traffic with AllTrafficAssigned False.
func routeStatus(rt *servingv1.Route, idx routeIndex) servingv1.RouteStatus {
	st := *rt.Status.DeepCopy()
	st.ObservedGeneration = rt.Generation
	readyRevs, exists, latestReady := idx.ready, idx.exists, idx.latestReady
	resolved := make([]servingv1.TrafficTarget, 0, len(rt.Spec.Traffic))
	var sum int64
	problem := ""
	for i, t := range rt.Spec.Traffic {
		t = *t.DeepCopy()
		if t.LatestRevision != nil && *t.LatestRevision {
			t.RevisionName = latestReady[t.ConfigurationName]
			t.ConfigurationName = ""
		} else if t.LatestRevision == nil {
			f := false
			t.LatestRevision = &f
		}
		switch {
		case t.RevisionName == "":
			problem = fmt.Sprintf("traffic[%d] has no Ready Revision", i)
		case !exists[t.RevisionName]:
			problem = fmt.Sprintf("Revision %q referenced in traffic not found", t.RevisionName)
		case !readyRevs[t.RevisionName]:
			problem = fmt.Sprintf("Revision %q referenced in traffic is not Ready", t.RevisionName)
		}
		if t.Percent != nil {
			sum += *t.Percent
		}
		resolved = append(resolved, t)
	}
	if problem == "" && sum != 100 {
		problem = fmt.Sprintf("traffic percents sum to %d, not 100", sum)
	}
	if problem != "" {
		st.Conditions = duckv1.Conditions{
			{Type: servingv1.RouteConditionAllTrafficAssigned, Status: corev1.ConditionFalse, Reason: "RevisionMissing", Message: problem},
			{Type: apis.ConditionReady, Status: corev1.ConditionFalse, Reason: "RevisionMissing", Message: problem},
		}
		return st
	}
	st.Traffic = resolved
	if rt.Annotations[AnnotationIngressNotReady] == "true" {
		st.Conditions = duckv1.Conditions{
			{Type: servingv1.RouteConditionAllTrafficAssigned, Status: corev1.ConditionTrue},
			{Type: servingv1.RouteConditionIngressReady, Status: corev1.ConditionUnknown, Reason: "IngressNotConfigured", Message: "Ingress has not yet been reconciled."},
			{Type: apis.ConditionReady, Status: corev1.ConditionUnknown, Reason: "IngressNotConfigured", Message: "Ingress has not yet been reconciled."},
		}
		return st
	}
	st.Conditions = duckv1.Conditions{
		{Type: servingv1.RouteConditionAllTrafficAssigned, Status: corev1.ConditionTrue},
		{Type: apis.ConditionReady, Status: corev1.ConditionTrue},
	}
	return st
}

func (s *Simulator) reconcileRouteStatus(ctx context.Context, rt *servingv1.Route, idx routeIndex) error {
	st := routeStatus(rt, idx)
	if equalStatus(st, rt.Status) {
		return nil
	}
	rt.Status = st
	if _, err := s.Serving.ServingV1().Routes(s.Namespace).UpdateStatus(ctx, rt, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("update Route %s status: %w", rt.Name, err)
	}
	return nil
}

func (s *Simulator) reconcileServiceStatus(ctx context.Context, svc *servingv1.Service, cfgs map[string]*servingv1.Configuration, routes map[string]*servingv1.Route) error {
	name := svc.Name
	cfg, rt := cfgs[name], routes[name]
	if cfg == nil || rt == nil {
		return nil
	}
	st := *svc.Status.DeepCopy()
	st.LatestCreatedRevisionName = cfg.Status.LatestCreatedRevisionName
	st.LatestReadyRevisionName = cfg.Status.LatestReadyRevisionName
	// The Service has observed its generation once its Route carries the
	// Service's traffic and has reconciled it.
	routeCurrent := equalJSON(rt.Spec.Traffic, serviceTraffic(svc)) && rt.Status.ObservedGeneration == rt.Generation
	routesReady := corev1.ConditionUnknown
	// Knative's Service reports its Route's Ready as RoutesReady.
	var routesWhy apis.Condition
	if c := rt.Status.GetCondition(apis.ConditionReady); routeCurrent && c != nil {
		routesReady, routesWhy = c.Status, *c
	}
	if routeCurrent {
		st.ObservedGeneration = svc.Generation
		st.Traffic = rt.Status.Traffic
	}
	cfgReady := corev1.ConditionUnknown
	if c := cfg.Status.GetCondition(apis.ConditionReady); c != nil {
		cfgReady = c.Status
	}
	ready := corev1.ConditionUnknown
	if routesReady == corev1.ConditionTrue && cfgReady == corev1.ConditionTrue {
		ready = corev1.ConditionTrue
	} else if routesReady == corev1.ConditionFalse {
		ready = corev1.ConditionFalse
	}
	st.Conditions = duckv1.Conditions{
		{Type: servingv1.ServiceConditionConfigurationsReady, Status: cfgReady},
		{Type: servingv1.ServiceConditionRoutesReady, Status: routesReady, Reason: routesWhy.Reason, Message: routesWhy.Message},
		{Type: apis.ConditionReady, Status: ready},
	}
	if equalStatus(st, svc.Status) {
		return nil
	}
	svc.Status = st
	if _, err := s.Serving.ServingV1().Services(s.Namespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("update Service %s status: %w", name, err)
	}
	return nil
}
