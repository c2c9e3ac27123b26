package voices

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDefaultIsFirstAndEnglish(t *testing.T) {
	all := All()
	if len(all) == 0 {
		t.Fatal("All: got no voices")
	}
	if got, want := all[0].ID, Default; got != want {
		t.Errorf("All()[0].ID: got %q, want %q", got, want)
	}
	v, ok := Lookup(Default)
	if !ok {
		t.Fatalf("Lookup(Default %q): not found", Default)
	}
	if !strings.HasPrefix(v.Language, "en") {
		t.Errorf("default voice language: got %q, want English", v.Language)
	}
}

func TestCatalogueWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range All() {
		if seen[v.ID] {
			t.Errorf("voice %q listed twice", v.ID)
		}
		seen[v.ID] = true
		if v.ID == "" || v.Name == "" || v.Language == "" {
			t.Errorf("voice %+v has an empty field", v)
		}
		// espeak-ng voice names are lower case; a capital would only
		// work by accident of its case-insensitive file lookup.
		if v.ID != strings.ToLower(v.ID) || strings.ContainsAny(v.ID, " \t") {
			t.Errorf("voice ID %q: want lower case with no spaces", v.ID)
		}
		if base, variant, ok := strings.Cut(v.ID, "+"); ok {
			if _, found := Lookup(base); !found {
				t.Errorf("variant %q: base voice %q is not in the catalogue", v.ID, base)
			}
			if variant == "" {
				t.Errorf("voice ID %q: empty variant", v.ID)
			}
		}
	}
	if n := len(seen); n < 15 || n > 30 {
		t.Errorf("catalogue size: got %d voices, want 15 to 30", n)
	}
}

func TestLookup(t *testing.T) {
	tests := []struct {
		id   string
		ok   bool
		name string
	}{
		{"en-us", true, "English (America)"},
		{"en", true, "English (Great Britain)"},
		{"en-us+f3", true, "English (America), female"},
		{"fr", true, "French (France)"},
		{"EN-US", false, ""}, // exact match only
		{"en-gb", false, ""}, // espeak-ng 1.51 has no voice of that name
		{" en-us", false, ""},
		{"", false, ""},
		{"klingon", false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			v, ok := Lookup(tc.id)
			if ok != tc.ok {
				t.Fatalf("Lookup(%q): got ok=%v, want %v", tc.id, ok, tc.ok)
			}
			if got, want := v.Name, tc.name; got != want {
				t.Errorf("Lookup(%q).Name: got %q, want %q", tc.id, got, want)
			}
			if ok && v.ID != tc.id {
				t.Errorf("Lookup(%q).ID: got %q", tc.id, v.ID)
			}
		})
	}
}

func TestAllReturnsACopy(t *testing.T) {
	a := All()
	a[0].ID = "changed"
	if got := All()[0].ID; got != Default {
		t.Errorf("All()[0].ID after modifying an earlier result: got %q, want %q", got, Default)
	}
}

func TestJSONNames(t *testing.T) {
	b, err := json.Marshal(Voice{ID: "en-us", Name: "English (America)", Language: "en-US"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"voice_id":"en-us","name":"English (America)","language":"en-US"}`; got != want {
		t.Errorf("JSON: got %s, want %s", got, want)
	}
}
