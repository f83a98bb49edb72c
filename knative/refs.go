package knative

import "strings"

// Kinds of objects sluice works with.
const (
	// KindService is a Knative Service: the target and the traffic object (Service mode).
	KindService = "Service"
	// KindConfiguration is a Knative Configuration whose Revisions roll out on a Route (Route mode).
	KindConfiguration = "Configuration"
	// KindRoute is the traffic object in Route mode.
	KindRoute = "Route"
)

// TargetRef names the object a service owner opted in: a Service, or a
// Configuration paired with a Route.
type TargetRef struct {
	// Cluster names the cluster the target is in, when several clusters
	// share one Temporal namespace; empty otherwise.
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
}

func (t TargetRef) String() string {
	s := t.Namespace + "/" + strings.ToLower(t.Kind) + "/" + t.Name
	if t.Cluster != "" {
		s = t.Cluster + ":" + s
	}
	return s
}

// In is t in cluster, unless t already names one.
func (t TargetRef) In(cluster string) TargetRef {
	if t.Cluster == "" {
		t.Cluster = cluster
	}
	return t
}

// TargetOf is the target a Revision rolls out on: its Service, or its
// Configuration when it has no Service (Route mode). It is the zero
// TargetRef for a Revision without Knative's owner labels.
func TargetOf(namespace string, l RevisionLabels) TargetRef {
	switch {
	case l.Service != "":
		return TargetRef{Namespace: namespace, Kind: KindService, Name: l.Service}
	case l.Configuration != "":
		return TargetRef{Namespace: namespace, Kind: KindConfiguration, Name: l.Configuration}
	}
	return TargetRef{}
}

// ObjectRef names the object whose traffic sluice writes: the Service itself,
// or the Route in Route mode.
type ObjectRef struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
}

func (o ObjectRef) String() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// RevisionRef names one Revision.
type RevisionRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}
