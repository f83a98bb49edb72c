package receiver

import (
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
)

func binaryMessage(ev cloudevents.Event) binding.Message {
	return binding.ToMessage(&ev)
}

// encodeSearchAttributes builds what Temporal's describe returns for a
// workflow with these (keyword) search attributes.
func encodeSearchAttributes(sa temporal.SearchAttributes) (*workflowpb.WorkflowExecutionInfo, error) {
	fields := map[string]*commonpb.Payload{}
	for k, v := range sa.GetUntypedValues() {
		p, err := converter.GetDefaultDataConverter().ToPayload(v)
		if err != nil {
			return nil, err
		}
		fields[k.GetName()] = p
	}
	return &workflowpb.WorkflowExecutionInfo{SearchAttributes: &commonpb.SearchAttributes{IndexedFields: fields}}, nil
}
