package console

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"
)

var fixtureKey = []byte("0123456789abcdef0123456789abcdef")

// A one-time link signs in once, as the actor it names, while the actor's key is the
// one it was made with and until it expires; a forged one never.
func TestConsoleOneTimeLink(t *testing.T) {
	f := newFixture(t, false)
	link := func() string {
		tok, _, err := NewLink(fixtureKey, Identity{Actor: 7}, f.b.pub, f.now)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	login := func(tok string) (int, string, string) {
		return f.do("POST", "/ui/api/login", `{"link":"`+tok+`"}`, "", nil)
	}
	tok := link()
	st, body, cookie := login(tok)
	if st != 200 || cookie == "" {
		t.Fatalf("sign-in by link: %d %s", st, body)
	}
	if st, body, _ := f.do("GET", "/ui/api/me", "", cookie, nil); st != 200 || !strings.Contains(body, `"name":"actor 7"`) {
		t.Errorf("me after the link: %d %s", st, body)
	}
	if st, body, _ := login(tok); st != 401 || !strings.Contains(body, "used already") {
		t.Errorf("the link again: %d %s", st, body)
	}
	if st, body, _ := login(tok[:len(tok)-2] + "xx"); st != 401 || !strings.Contains(body, "not one this server made") {
		t.Errorf("a forged link: %d %s", st, body)
	}
	if st, body, _ := f.do("POST", "/ui/api/login", `{"link":"`+link()+`","secret":"x"}`, "", nil); st != 400 {
		t.Errorf("a link and a secret: %d %s", st, body)
	}
	old := link()
	f.advance(LinkTTL + time.Second)
	if st, body, _ := login(old); st != 401 || !strings.Contains(body, "expired") {
		t.Errorf("an expired link: %d %s", st, body)
	}
	stale := link()
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	f.b.mu.Lock()
	f.b.pub = pub
	f.b.mu.Unlock()
	if st, body, _ := login(stale); st != 401 || !strings.Contains(body, "replaced or revoked") {
		t.Errorf("a link of a replaced key: %d %s", st, body)
	}
}
