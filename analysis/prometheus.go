package analysis

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Prometheus runs instant queries against the Prometheus HTTP API.
type Prometheus struct {
	HTTP *http.Client
}

// queryResponse is the part of /api/v1/query's answer sluice reads.
type queryResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

type queryData struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// Query evaluates query at time at on the Prometheus at base. It returns
// the single value (nil when the result is empty: no data) or an error for
// anything that is not a measurement: Prometheus unreachable, a PromQL
// error, or a result of several series (the query must aggregate to one).
func (p Prometheus) Query(ctx context.Context, base, query string, at time.Time) (*float64, error) {
	u, err := url.Parse(strings.TrimSuffix(base, "/") + "/api/v1/query")
	if err != nil {
		return nil, fmt.Errorf("prometheus URL %q: %w", base, err)
	}
	form := url.Values{"query": {query}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", "sluice")
	client := p.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query Prometheus at %s: %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("read Prometheus answer: %w", err)
	}
	var qr queryResponse
	if err := json.Unmarshal(body, &qr); err != nil {
		return nil, fmt.Errorf("Prometheus at %s answered HTTP %d with no API response: %s", base, resp.StatusCode, excerpt(body))
	}
	if qr.Status != "success" {
		return nil, fmt.Errorf("Prometheus rejected the query (%s): %s", qr.ErrorType, qr.Error)
	}
	var data queryData
	if err := json.Unmarshal(qr.Data, &data); err != nil {
		return nil, fmt.Errorf("decode Prometheus data: %w", err)
	}
	switch data.ResultType {
	case "scalar":
		var pair [2]any
		if err := json.Unmarshal(data.Result, &pair); err != nil {
			return nil, fmt.Errorf("decode scalar: %w", err)
		}
		return sampleValue(pair)
	case "vector":
		var samples []sample
		if err := json.Unmarshal(data.Result, &samples); err != nil {
			return nil, fmt.Errorf("decode vector: %w", err)
		}
		switch len(samples) {
		case 0:
			return nil, nil
		case 1:
			return sampleValue(samples[0].Value)
		}
		return nil, fmt.Errorf("the query returned %d series; aggregate it to one, e.g. with sum(...)", len(samples))
	}
	return nil, fmt.Errorf("the query returned a %s; it must return a single number (an instant vector of one series, or a scalar)", data.ResultType)
}

// sampleValue reads a [time, "value"] pair; NaN (0/0: no requests) is no data.
func sampleValue(pair [2]any) (*float64, error) {
	s, ok := pair[1].(string)
	if !ok {
		return nil, fmt.Errorf("sample value %v is not a string", pair[1])
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("sample value %q: %w", s, err)
	}
	if math.IsNaN(v) {
		return nil, nil
	}
	if math.IsInf(v, 0) {
		return nil, fmt.Errorf("the query returned %s", s)
	}
	return &v, nil
}

func excerpt(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
