// Command brook-probe is the health check of images that have no shell and
// no curl (they are FROM scratch): it GETs one URL and exits 0 on a 2xx
// answer, 1 otherwise.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: brook-probe URL")
		os.Exit(2)
	}
	if err := probe(os.Args[1], 2*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "brook-probe:", err)
		os.Exit(1)
	}
}

func probe(url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	cerr := resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("get %s: status %s", url, resp.Status)
	}
	if cerr != nil {
		return fmt.Errorf("get %s: close body: %w", url, cerr)
	}
	return nil
}
