// Package browser drives a real headless Chromium through the Chrome
// DevTools Protocol, for tests that must see what a person sees: it opens a
// page, waits until its text shows what is expected, and takes a screenshot.
package browser

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/websocket"
)

// Browser is one headless Chromium process.
type Browser struct {
	cmd     *exec.Cmd
	dataDir string
	port    string
}

// Start launches chromium headless with a fresh profile in dir. The flags
// keep it off the network beyond the pages it is sent to.
func Start(ctx context.Context, chromium, dir string) (*Browser, error) {
	b := &Browser{dataDir: filepath.Join(dir, "profile")}
	b.cmd = exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--remote-allow-origins=http://127.0.0.1",
		"--user-data-dir="+b.dataDir, "--window-size=1440,1300", "about:blank")
	// Its own process group: Close ends the renderers and helpers too.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", chromium, err)
	}
	// Chromium writes the port it chose into DevToolsActivePort.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		raw, err := os.ReadFile(filepath.Join(b.dataDir, "DevToolsActivePort"))
		if err == nil && strings.Contains(string(raw), "\n") {
			b.port = strings.SplitN(string(raw), "\n", 2)[0]
			return b, nil
		}
		select {
		case <-ctx.Done():
			b.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	b.Close()
	return nil, fmt.Errorf("chromium did not open its DevTools port within 30s")
}

// Close ends the browser.
func (b *Browser) Close() {
	if b.cmd.Process != nil {
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		_ = b.cmd.Wait()
	}
}

// Page is one tab under DevTools control.
type Page struct {
	ws   *websocket.Conn
	mu   sync.Mutex
	next int
}

// Open opens url in a new tab. The URL is sent through the DevTools
// protocol, not the /json/new query, which would decode escapes in its path.
func (b *Browser) Open(url string) (*Page, error) {
	req, _ := http.NewRequest(http.MethodPut, "http://127.0.0.1:"+b.port+"/json/new?about:blank", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("open a tab: %w", err)
	}
	defer resp.Body.Close()
	var target struct {
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&target); err != nil {
		return nil, fmt.Errorf("open a tab: %w", err)
	}
	ws, err := websocket.Dial(target.WebSocketDebuggerURL, "", "http://127.0.0.1")
	if err != nil {
		return nil, fmt.Errorf("connect to the tab: %w", err)
	}
	p := &Page{ws: ws}
	if err := p.call("Page.navigate", map[string]any{"url": url}, nil); err != nil {
		ws.Close()
		return nil, err
	}
	return p, nil
}

// call sends one DevTools command and returns its result, skipping events.
func (p *Page) call(method string, params map[string]any, result any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	id := p.next
	if err := websocket.JSON.Send(p.ws, map[string]any{"id": id, "method": method, "params": params}); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	_ = p.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		var msg struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := websocket.JSON.Receive(p.ws, &msg); err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
		if msg.ID != id {
			continue
		}
		if msg.Error != nil {
			return fmt.Errorf("%s: %s", method, msg.Error.Message)
		}
		if result == nil {
			return nil
		}
		return json.Unmarshal(msg.Result, result)
	}
}

// Text returns the page's visible text, with that of its same-origin
// frames (the Temporal UI renders Markdown in frames).
func (p *Page) Text() (string, error) {
	return p.Eval(`[document.body ? document.body.innerText : ''].concat(
		Array.from(document.querySelectorAll('iframe')).map(f => {
			try { return f.contentDocument && f.contentDocument.body ? f.contentDocument.body.innerText : '' } catch (e) { return '' }
		})).join('\n')`)
}

// Eval evaluates a JavaScript expression in the page and returns its value as a string.
func (p *Page) Eval(expr string) (string, error) {
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
	}
	err := p.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r)
	if r.Result.Value == nil {
		return "", err
	}
	return fmt.Sprint(r.Result.Value), err
}

// HTML returns the page's DOM as HTML.
func (p *Page) HTML() (string, error) {
	var r struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
	}
	err := p.call("Runtime.evaluate", map[string]any{"expression": "document.documentElement.outerHTML", "returnByValue": true}, &r)
	return r.Result.Value, err
}

// WaitText waits until the page's text contains every one of want.
func (p *Page) WaitText(ctx context.Context, want ...string) (string, error) {
	var text string
	for {
		t, err := p.Text()
		if err != nil {
			return text, err
		}
		text = t
		missing := ""
		for _, w := range want {
			if !strings.Contains(text, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return text, nil
		}
		select {
		case <-ctx.Done():
			return text, fmt.Errorf("the page never showed %q", missing)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Screenshot saves a PNG of the whole page.
func (p *Page) Screenshot(path string) error {
	var r struct {
		Data string `json:"data"`
	}
	if err := p.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &r); err != nil {
		return err
	}
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		return err
	}
	return os.WriteFile(path, png, 0o644)
}

// Close closes the tab's connection.
func (p *Page) Close() { _ = p.ws.Close() }
