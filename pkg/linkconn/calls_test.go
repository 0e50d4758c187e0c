package linkconn

import "testing"

func TestCalls(t *testing.T) {
	var c Calls[string]
	id1, a1, end1 := c.Add()
	id2, a2, end2 := c.Add()
	defer end2()
	if id1 == id2 {
		t.Fatalf("two requests share id %d", id1)
	}
	if !c.Answer(id1, "one") {
		t.Fatal("a waiting request was not answered")
	}
	if c.Answer(id1, "again") {
		t.Fatal("a request was answered twice")
	}
	if got := <-a1; got != "one" {
		t.Fatalf("answer %q, want one", got)
	}
	end1()
	if c.Answer(99, "x") {
		t.Fatal("an unknown id was answered")
	}
	end2()
	if c.Answer(id2, "late") {
		t.Fatal("a request that ended was answered")
	}
	select {
	case v := <-a2:
		t.Fatalf("an ended request got %q", v)
	default:
	}
}
