package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// profileDir is -pprof: where the measured window's profiles of sluice's
// worker and receiver go ("": none taken, and the processes serve none).
var profileDir = new(string)

// profileSlice is how long each CPU profile runs: a window is covered by
// back-to-back slices, which `go tool pprof` merges when given them all.
const profileSlice = 10 * time.Second

// profiles takes CPU profiles of each target (name → base URL of its
// /debug/pprof/) back to back from now until the returned stop is called,
// then each one's heap and allocations, into dir as label-name-cpu-N.pprof,
// label-name-heap.pprof and label-name-allocs.pprof. The slice running when
// stop comes is given up: it would hold time outside the window.
func profiles(ctx context.Context, log *slog.Logger, dir, label string, targets map[string]string) (stop func()) {
	if dir == "" {
		return func() {}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Warn("bench: no profiles", "error", err)
		return func() {}
	}
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for name, base := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; pctx.Err() == nil; i++ {
				file := filepath.Join(dir, fmt.Sprintf("%s-%s-cpu-%02d.pprof", label, name, i))
				url := fmt.Sprintf("%sprofile?seconds=%d", base, int(profileSlice.Seconds()))
				if err := fetchTo(pctx, url, file); err != nil && pctx.Err() == nil {
					log.Warn("bench: a CPU profile failed", "process", name, "error", err)
					return
				}
			}
		}()
	}
	return func() {
		cancel()
		wg.Wait()
		for name, base := range targets {
			for _, kind := range []string{"heap", "allocs"} {
				file := filepath.Join(dir, fmt.Sprintf("%s-%s-%s.pprof", label, name, kind))
				if err := fetchTo(ctx, base+kind, file); err != nil {
					log.Warn("bench: a profile failed", "process", name, "profile", kind, "error", err)
				}
			}
		}
		log.Info("bench: profiles written", "dir", dir, "read", "go tool pprof -top "+filepath.Join(dir, label+"-worker-cpu-*.pprof"))
	}
}

// fetchTo writes what url answers to file; a cancelled fetch leaves no file.
func fetchTo(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(file, body, 0o644)
}
