package rest_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cfgd/cfgd/api/rest"
	"github.com/cfgd/cfgd/cmd/cfgd/testenv"
)

// A request in flight when shutdown starts still gets its full answer.
func TestShutdownDrainsInFlightRequests(t *testing.T) {
	t.Parallel()
	router, err := rest.NewRouter(testenv.Quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	router.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		time.Sleep(300 * time.Millisecond)
		rest.JSON(w, http.StatusOK, map[string]string{"done": "yes"})
	})
	srv := rest.NewServer("127.0.0.1:0", router, 5*time.Second, testenv.Quiet())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	addr := <-srv.Started()

	type result struct {
		code int
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/slow")
		if err != nil {
			res <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		res <- result{code: resp.StatusCode, body: string(b)}
	}()
	<-entered
	cancel()
	got := <-res
	if got.err != nil || got.code != 200 || !strings.Contains(got.body, "yes") {
		t.Fatalf("in-flight request: %+v", got)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := http.Get("http://" + addr + "/slow"); err == nil {
		t.Fatal("server still accepts connections after shutdown")
	}
}

func TestErrorsAreJSONAndPanicsAre500WithoutStack(t *testing.T) {
	t.Parallel()
	router, err := rest.NewRouter(testenv.Quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	router.HandleFunc("/boom", func(http.ResponseWriter, *http.Request) { panic("secret internals") }).Methods(http.MethodGet)
	router.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Name string `json:"name"`
		}
		if rest.DecodeOr400(w, r, &body) {
			rest.JSON(w, 200, body)
		}
	}).Methods(http.MethodPost)
	srv := rest.NewServer("127.0.0.1:0", router, time.Second, testenv.Quiet())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Run(ctx) }()
	base := "http://" + <-srv.Started()

	tests := []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"GET", "/boom", "", 500, `"code":"internal"`},
		{"GET", "/nope", "", 404, `"code":"not_found"`},
		{"POST", "/echo", `{"name":`, 400, `not valid JSON`},
		{"POST", "/echo", ``, 400, `empty`},
		{"POST", "/echo", `{"name":"a","x":1}`, 400, `unknown field`},
		{"POST", "/echo", `{"name":5}`, 400, `must be of type string`},
		{"POST", "/echo", `[1]`, 400, `JSON object`},
		{"POST", "/echo", `{"name":"a"}{}`, 400, `single JSON object`},
		{"POST", "/echo", `{"name":"` + strings.Repeat("a", 2<<20) + `"}`, 400, `larger than`},
		{"POST", "/echo", `{"name":"ok"}`, 200, `"name":"ok"`},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.want) || strings.Contains(string(b), "secret internals") {
			t.Errorf("%s %s %.40q: %d %s", tc.method, tc.path, tc.body, resp.StatusCode, b)
		}
	}
}
