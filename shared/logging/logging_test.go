package logging

import "testing"

func TestNew(t *testing.T) {
	for _, f := range []string{"json", "console"} {
		l, err := New("debug", f)
		if err != nil || l == nil {
			t.Fatalf("New(debug, %s) = %v", f, err)
		}
	}
	if _, err := New("loud", "json"); err == nil {
		t.Fatal("bad level accepted")
	}
	if _, err := New("info", "xml"); err == nil {
		t.Fatal("bad format accepted")
	}
}
