package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ok.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	}))
	defer bad.Close()
	if err := probe(ok.URL, time.Second); err != nil {
		t.Errorf("healthy endpoint: %v", err)
	}
	if err := probe(bad.URL, time.Second); err == nil {
		t.Error("503 endpoint reported healthy")
	}
	if err := probe("http://127.0.0.1:1/", time.Second); err == nil {
		t.Error("closed port reported healthy")
	}
}
