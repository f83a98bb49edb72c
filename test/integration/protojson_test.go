package integration

import (
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

func protojsonMarshal(ev *historypb.HistoryEvent) ([]byte, error) {
	return protojson.Marshal(ev)
}
