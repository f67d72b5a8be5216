package main

import (
	"encoding/json"
	"os"
	"sync"
	"time"
)

// history is ./data/chaos/<seed>/history.jsonl: the schedule, every
// fault and heal, every operation and what it got back, one JSON object
// a line with "t", the seconds since the run began.
type history struct {
	mu    sync.Mutex
	f     *os.File
	start time.Time
	enc   *json.Encoder
}

func openHistory(path string, start time.Time) (*history, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return &history{f: f, start: start, enc: json.NewEncoder(f)}, nil
}

func (h *history) write(rec map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rec["t"] = float64(time.Since(h.start).Milliseconds()) / 1000
	_ = h.enc.Encode(rec)
}

func (h *history) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.f.Close()
}
