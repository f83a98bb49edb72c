package measure

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
	data, err := p.call(ctx, base, "query", url.Values{"query": {query}, "time": {promTime(at)}})
	if err != nil {
		return nil, err
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

// QueryRange evaluates query at every step from start to end, and returns
// the values of its one series in time order: the samples a comparison
// judges. Steps without a value (no series then, or NaN: no requests) are
// left out, so the count says how much data there was; none at all is an
// empty list, not an error.
func (p Prometheus) QueryRange(ctx context.Context, base, query string, start, end time.Time, step time.Duration) ([]float64, error) {
	if step <= 0 || !end.After(start) {
		return nil, fmt.Errorf("range query from %s to %s at %s: the end must follow the start, and the step be positive", start, end, step)
	}
	data, err := p.call(ctx, base, "query_range", url.Values{"query": {query}, "start": {promTime(start)}, "end": {promTime(end)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', 3, 64)}})
	if err != nil {
		return nil, err
	}
	if data.ResultType != "matrix" {
		return nil, fmt.Errorf("the range query returned a %s, not a matrix", data.ResultType)
	}
	var series []struct {
		Values [][2]any `json:"values"`
	}
	if err := json.Unmarshal(data.Result, &series); err != nil {
		return nil, fmt.Errorf("decode matrix: %w", err)
	}
	switch len(series) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, fmt.Errorf("the query returned %d series; aggregate it to one, e.g. with sum(...)", len(series))
	}
	out := make([]float64, 0, len(series[0].Values))
	for _, pair := range series[0].Values {
		v, err := sampleValue(pair)
		if err != nil {
			return nil, err
		}
		if v != nil {
			out = append(out, *v)
		}
	}
	return out, nil
}

func promTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// call POSTs form to the API endpoint (query, query_range) and returns the
// answer's data, or an error that says what went wrong.
func (p Prometheus) call(ctx context.Context, base, endpoint string, form url.Values) (queryData, error) {
	var data queryData
	u, err := url.Parse(strings.TrimSuffix(base, "/") + "/api/v1/" + endpoint)
	if err != nil {
		return data, fmt.Errorf("prometheus URL %q: %w", base, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return data, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", "sluice")
	client := p.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return data, fmt.Errorf("query Prometheus at %s: %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return data, fmt.Errorf("read Prometheus answer: %w", err)
	}
	var qr queryResponse
	if err := json.Unmarshal(body, &qr); err != nil {
		return data, fmt.Errorf("Prometheus at %s answered HTTP %d with no API response: %s", base, resp.StatusCode, excerpt(body))
	}
	if qr.Status != "success" {
		return data, fmt.Errorf("Prometheus rejected the query (%s): %s", qr.ErrorType, qr.Error)
	}
	if err := json.Unmarshal(qr.Data, &data); err != nil {
		return data, fmt.Errorf("decode Prometheus data: %w", err)
	}
	return data, nil
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
