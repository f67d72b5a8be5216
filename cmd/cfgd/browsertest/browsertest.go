// Package browsertest is the test rig for the pages people use: headless
// Debian Chromium driven by chromedp, and the folder that keeps the
// screenshots the tests take.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
)

// Keep writes the screenshots (file name to PNG) into ArtifactDir and logs
// where they are.
func Keep(t testing.TB, shots map[string][]byte) {
	t.Helper()
	dir := ArtifactDir(t)
	for name, b := range shots {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
}

// ArtifactDir keeps the screenshots (testdata/artifacts of the test's
// package, or CFGD_TEST_ARTIFACTS).
func ArtifactDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("CFGD_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("testdata", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Chromium starts headless Debian chromium for t (make test installs it)
// and returns a chromedp context bound to it; it stops when t ends.
func Chromium(t testing.TB) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (apt-get install -y chromium; make test installs it): %v", err)
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelB(); cancelA() })
	// The first run starts the browser and binds it to ctx.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}
