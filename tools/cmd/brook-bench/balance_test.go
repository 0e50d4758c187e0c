package main

import "testing"

// TestWithinMargin: the balance goal is every host within 10% of the even
// share (75 of 300 on 4 hosts: 67.5 to 82.5).
func TestWithinMargin(t *testing.T) {
	for _, c := range []struct {
		counts map[string]int
		want   bool
	}{
		{map[string]int{"h1": 75, "h2": 75, "h3": 75, "h4": 75}, true},
		{map[string]int{"h1": 82, "h2": 80, "h3": 70, "h4": 68}, true},
		{map[string]int{"h1": 83, "h2": 80, "h3": 70, "h4": 67}, false},
		{map[string]int{"h1": 125, "h2": 96, "h3": 75, "h4": 4}, false},
	} {
		if got := withinMargin(c.counts, 300, balanceMargin); got != c.want {
			t.Errorf("%v: within %v, want %v", c.counts, got, c.want)
		}
	}
}
