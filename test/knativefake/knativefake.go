// Package knativefake is a unit-test double of Knative Serving: the generated
// fake clientset plus reactors that play Knative's Route reconciler, so a
// traffic write shows up in status the way it does on a cluster, and its
// autoscaler, so a Revision's min-scale shows up as Ready pods at once.
//
// What the fake hides, and the integration tests on a real API server catch:
// it accepts strategic-merge patches on custom resources (a real API server
// answers 415), runs no admission webhook or schema validation, and does not
// reject a patch whose metadata.resourceVersion is stale (a JSON patch's
// test operations it applies, as the API server does, but a failed one is a
// plain error where the API server answers 422).
package knativefake

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	"knative.dev/serving/pkg/apis/autoscaling"
	"knative.dev/serving/pkg/apis/serving"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"knative.dev/serving/pkg/client/clientset/versioned/fake"
)

// Cluster is a fake Knative Serving API with status reconciliation.
type Cluster struct {
	*fake.Clientset

	mu sync.Mutex
	// FreezeStatus, when set, stops status from following spec: a traffic
	// write then never verifies.
	FreezeStatus bool
	// Stall names a Revision whose traffic never shows in status: a write
	// that gives it traffic never verifies, a write that does not, does.
	Stall string
	// Writes counts traffic writes (patches) by object name.
	Writes map[string]int
	// PodCap caps the Ready pods reported for a Revision, by name: a stage
	// whose pods never come.
	PodCap map[string]int32
	// Samples holds, after every write to a Service or Revision, each
	// Revision's Ready pods and each Service's traffic by Revision.
	Samples    []Sample
	everRouted map[string]bool
}

// Sample is the cluster after one write.
type Sample struct {
	// Wrote names the object written: a Revision, Service or Route name.
	Wrote   string
	Pods    map[string]int32
	Traffic map[string]int64
}

// New returns a fake cluster holding objs, with status reconciled for every
// Service and Route among them.
func New(objs ...runtime.Object) *Cluster {
	c := &Cluster{Clientset: fake.NewSimpleClientset(objs...), Writes: map[string]int{}, PodCap: map[string]int32{}}
	for _, resource := range []string{"services", "routes"} {
		c.PrependReactor("patch", resource, c.reconcileAfter)
		c.PrependReactor("update", resource, c.reconcileAfter)
	}
	c.PrependReactor("patch", "revisions", c.scaleAfter)
	for _, o := range objs {
		switch o := o.(type) {
		case *servingv1.Service:
			c.reconcile(o.Namespace, "services", o.Name, false)
		case *servingv1.Route:
			c.reconcile(o.Namespace, "routes", o.Name, false)
		}
	}
	return c
}

func (c *Cluster) reconcileAfter(action k8stesting.Action) (bool, runtime.Object, error) {
	if action.GetSubresource() == "status" {
		return false, nil, nil
	}
	handled, obj, err := k8stesting.ObjectReaction(c.Tracker())(action)
	if err != nil || !handled {
		return handled, obj, err
	}
	name := ""
	switch o := obj.(type) {
	case *servingv1.Service:
		name = o.Name
	case *servingv1.Route:
		name = o.Name
	}
	c.mu.Lock()
	if p, ok := action.(k8stesting.PatchAction); ok && (bytes.Contains(p.GetPatch(), []byte(`"spec"`)) || bytes.Contains(p.GetPatch(), []byte(`"/spec/`))) {
		// A traffic write (a merge or a JSON patch); an annotation of the
		// object is not one.
		c.Writes[name]++
	}
	c.mu.Unlock()
	out := c.reconcile(action.GetNamespace(), action.GetResource().Resource, name, true)
	c.sample(name)
	return true, out, nil
}

// scaleAfter plays the autoscaler after a Revision is written.
func (c *Cluster) scaleAfter(action k8stesting.Action) (bool, runtime.Object, error) {
	handled, obj, err := k8stesting.ObjectReaction(c.Tracker())(action)
	if err != nil || !handled {
		return handled, obj, err
	}
	c.sample(action.(k8stesting.PatchAction).GetName())
	if r, ok := obj.(*servingv1.Revision); ok {
		if fresh, err := c.Tracker().Get(servingv1.SchemeGroupVersion.WithResource("revisions"), r.Namespace, r.Name); err == nil {
			obj = fresh
		}
	}
	return true, obj, nil
}

// sample plays the autoscaler — a Revision whose min-scale is set runs that
// many Ready pods (up to its PodCap) at once, and one that had traffic and
// no Service routes to any more runs none, as Knative scales down a
// Revision in reserve — then records every Revision's Ready pods and every
// Service's traffic.
func (c *Cluster) sample(wrote string) {
	s := Sample{Wrote: wrote, Pods: map[string]int32{}, Traffic: map[string]int64{}}
	routed := map[string]bool{}
	svcs, _ := c.Tracker().List(servingv1.SchemeGroupVersion.WithResource("services"), servingv1.SchemeGroupVersion.WithKind("Service"), "")
	if l, ok := svcs.(*servingv1.ServiceList); ok {
		for _, svc := range l.Items {
			for _, t := range svc.Status.Traffic {
				routed[t.RevisionName] = true
				if t.Percent != nil {
					s.Traffic[t.RevisionName] += *t.Percent
				}
			}
		}
	}
	gvr := servingv1.SchemeGroupVersion.WithResource("revisions")
	revs, _ := c.Tracker().List(gvr, servingv1.SchemeGroupVersion.WithKind("Revision"), "")
	l, _ := revs.(*servingv1.RevisionList)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.everRouted == nil {
		c.everRouted = map[string]bool{}
	}
	for name := range routed {
		c.everRouted[name] = true
	}
	for i := range l.Items {
		r := &l.Items[i]
		if v, ok := r.Annotations[autoscaling.MinScaleAnnotationKey]; ok {
			n, _ := strconv.ParseInt(v, 10, 32)
			want, ready := int32(n), int32(n)
			if cap, ok := c.PodCap[r.Name]; ok {
				ready = min(ready, cap)
			}
			if c.everRouted[r.Name] && !routed[r.Name] {
				want, ready = 0, 0
			}
			state := r.Labels[serving.RoutingStateLabelKey]
			switch {
			case c.everRouted[r.Name] && !routed[r.Name]:
				state = string(servingv1.RoutingStateReserve)
			case routed[r.Name]:
				state = string(servingv1.RoutingStateActive)
			}
			if r.Status.ActualReplicas == nil || *r.Status.ActualReplicas != ready || r.Status.DesiredReplicas == nil || *r.Status.DesiredReplicas != want ||
				r.Labels[serving.RoutingStateLabelKey] != state {
				r = r.DeepCopy()
				r.Status.DesiredReplicas, r.Status.ActualReplicas = &want, &ready
				if state != "" {
					if r.Labels == nil {
						r.Labels = map[string]string{}
					}
					r.Labels[serving.RoutingStateLabelKey] = state
				}
				_ = c.Tracker().Update(gvr, r, r.Namespace)
			}
		}
		if r.Status.ActualReplicas != nil {
			s.Pods[r.Name] = *r.Status.ActualReplicas
		}
	}
	c.Samples = append(c.Samples, s)
}

// SetPodCap caps a Revision's Ready pods (or lifts the cap, at -1).
func (c *Cluster) SetPodCap(name string, n int32) {
	c.mu.Lock()
	if n < 0 {
		delete(c.PodCap, name)
	} else {
		c.PodCap[name] = n
	}
	c.mu.Unlock()
}

// Pods reports the Ready pods a Revision runs now.
func (c *Cluster) Pods(ns, name string) int32 {
	obj, err := c.Tracker().Get(servingv1.SchemeGroupVersion.WithResource("revisions"), ns, name)
	if err != nil {
		return 0
	}
	if n := obj.(*servingv1.Revision).Status.ActualReplicas; n != nil {
		return *n
	}
	return 0
}

// SamplesNow copies the samples recorded so far.
func (c *Cluster) SamplesNow() []Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Sample(nil), c.Samples...)
}

// reconcile bumps the generation on a write (the fake does not) and, unless
// frozen, copies spec.traffic into status with latestRevision resolved.
func (c *Cluster) reconcile(ns, resource, name string, written bool) runtime.Object {
	c.mu.Lock()
	frozen, stall := c.FreezeStatus, c.Stall
	c.mu.Unlock()
	gvr := servingv1.SchemeGroupVersion.WithResource(resource)
	obj, err := c.Tracker().Get(gvr, ns, name)
	if err != nil {
		return nil
	}
	stalled := func(traffic []servingv1.TrafficTarget) bool {
		for _, t := range traffic {
			if stall != "" && t.RevisionName == stall && t.Percent != nil && *t.Percent > 0 {
				return true
			}
		}
		return false
	}
	switch o := obj.(type) {
	case *servingv1.Service:
		o = o.DeepCopy()
		if written {
			o.Generation++
		}
		if !frozen && !stalled(o.Spec.Traffic) {
			o.Status.ObservedGeneration = o.Generation
			o.Status.Traffic = tagURLs(ns, o.Name, c.resolve(ns, o.Name, o.Spec.Traffic))
			o.Status.Conditions = readyConditions(servingv1.ServiceConditionRoutesReady, servingv1.ServiceConditionConfigurationsReady)
		}
		_ = c.Tracker().Update(gvr, o, ns)
		return o
	case *servingv1.Route:
		o = o.DeepCopy()
		if written {
			o.Generation++
		}
		if !frozen && !stalled(o.Spec.Traffic) {
			o.Status.ObservedGeneration = o.Generation
			o.Status.Traffic = tagURLs(ns, o.Name, c.resolve(ns, "", o.Spec.Traffic))
			o.Status.Conditions = readyConditions(servingv1.RouteConditionAllTrafficAssigned, apis.ConditionReady)
		}
		_ = c.Tracker().Update(gvr, o, ns)
		return o
	}
	return obj
}

func readyConditions(types ...apis.ConditionType) duckv1.Conditions {
	out := make(duckv1.Conditions, len(types))
	for i, t := range types {
		out[i] = apis.Condition{Type: t, Status: "True"}
	}
	return out
}

// resolve names the Revision behind each latestRevision target: the newest
// Ready Revision of its Configuration.
func (c *Cluster) resolve(ns, config string, traffic []servingv1.TrafficTarget) []servingv1.TrafficTarget {
	out := make([]servingv1.TrafficTarget, len(traffic))
	for i, t := range traffic {
		t = *t.DeepCopy()
		if t.LatestRevision != nil && *t.LatestRevision {
			cfg := t.ConfigurationName
			if cfg == "" {
				cfg = config
			}
			t.RevisionName = c.latestReady(ns, cfg)
		}
		out[i] = t
	}
	return out
}

// tagURLs gives each tagged target the URL Knative's default domain
// template would: http://TAG-NAME.NAMESPACE.example.com.
func tagURLs(ns, name string, traffic []servingv1.TrafficTarget) []servingv1.TrafficTarget {
	for i, t := range traffic {
		if t.Tag != "" {
			traffic[i].URL = &apis.URL{Scheme: "http", Host: t.Tag + "-" + name + "." + ns + ".example.com"}
		}
	}
	return traffic
}

func (c *Cluster) latestReady(ns, config string) string {
	objs, err := c.Tracker().List(servingv1.SchemeGroupVersion.WithResource("revisions"), servingv1.SchemeGroupVersion.WithKind("Revision"), ns)
	if err != nil {
		return ""
	}
	best, bestGen := "", -1
	for _, r := range objs.(*servingv1.RevisionList).Items {
		g, _ := strconv.Atoi(r.Labels[serving.ConfigurationGenerationLabelKey])
		if r.Labels[serving.ConfigurationLabelKey] == config && r.Status.GetCondition(apis.ConditionReady).IsTrue() && g > bestGen {
			best, bestGen = r.Name, g
		}
	}
	return best
}

// SetRevisionReady marks a Revision Ready (status "True"), failed ("False")
// with a reason, or pending ("Unknown").
func (c *Cluster) SetRevisionReady(ns, name, status, reason, message string) error {
	gvr := servingv1.SchemeGroupVersion.WithResource("revisions")
	obj, err := c.Tracker().Get(gvr, ns, name)
	if err != nil {
		return err
	}
	r := obj.(*servingv1.Revision).DeepCopy()
	r.Status.ObservedGeneration = r.Generation
	r.Status.Conditions = duckv1.Conditions{{Type: apis.ConditionReady, Status: "Unknown"}}
	r.Status.Conditions[0].Status = corev1.ConditionStatus(status)
	r.Status.Conditions[0].Reason, r.Status.Conditions[0].Message = reason, message
	return c.Tracker().Update(gvr, r, ns)
}

// SetFrozen stops or restarts status reconciliation; on restart every
// Service and Route catches up at once.
func (c *Cluster) SetFrozen(frozen bool) {
	c.mu.Lock()
	c.FreezeStatus = frozen
	c.mu.Unlock()
	if frozen {
		return
	}
	for _, resource := range []string{"services", "routes"} {
		gvr := servingv1.SchemeGroupVersion.WithResource(resource)
		kind := servingv1.SchemeGroupVersion.WithKind(map[string]string{"services": "Service", "routes": "Route"}[resource])
		list, err := c.Tracker().List(gvr, kind, "")
		if err != nil {
			continue
		}
		switch l := list.(type) {
		case *servingv1.ServiceList:
			for _, o := range l.Items {
				c.reconcile(o.Namespace, resource, o.Name, false)
			}
		case *servingv1.RouteList:
			for _, o := range l.Items {
				c.reconcile(o.Namespace, resource, o.Name, false)
			}
		}
	}
}

// WriteCount reports how many traffic patches an object has had.
func (c *Cluster) WriteCount(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Writes[name]
}

// Service builds an opted-in Service with the given annotations and traffic.
func Service(ns, name string, annotations map[string]string, traffic ...servingv1.TrafficTarget) *servingv1.Service {
	ann := map[string]string{"sluice.dev/rollout": "enabled"}
	for k, v := range annotations {
		ann[k] = v
	}
	return &servingv1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann, Generation: 1, ResourceVersion: "1"},
		Spec:       servingv1.ServiceSpec{RouteSpec: servingv1.RouteSpec{Traffic: traffic}},
	}
}

// Revision builds a Revision of config with the given configuration
// generation, Ready or not yet.
func Revision(ns, config string, gen int, ready bool) *servingv1.Revision {
	r := &servingv1.Revision{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: fmt.Sprintf("%s-%05d", config, gen), Generation: 1,
		Labels: map[string]string{serving.ConfigurationLabelKey: config, serving.ConfigurationGenerationLabelKey: strconv.Itoa(gen)},
	}}
	status := "Unknown"
	if ready {
		status = "True"
	}
	r.Status.ObservedGeneration = 1
	r.Status.Conditions = duckv1.Conditions{{Type: apis.ConditionReady, Status: corev1.ConditionStatus(status)}}
	return r
}

// Target builds a traffic target: a named Revision, or "@latest" for latestRevision.
func Target(revision string, percent int64, tag string) servingv1.TrafficTarget {
	t := servingv1.TrafficTarget{Tag: tag, Percent: &percent}
	if revision == "@latest" {
		latest := true
		t.LatestRevision = &latest
		return t
	}
	t.RevisionName = revision
	return t
}
