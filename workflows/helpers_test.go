package workflows

import (
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"
)

func converterDecode(can *workflow.ContinueAsNewError, into *Input) error {
	return converter.GetDefaultDataConverter().FromPayloads(can.Input, into)
}
