// Package voices is the catalogue of text-to-speech voices the service
// offers. The IDs are espeak-ng voice names as Debian bookworm's espeak-ng
// 1.51 accepts them (the renderer's gpu-fleet/tts speaks them), optionally
// with a "+variant" suffix.
//
// The package is pure Go: the API's Lambda handlers validate voice IDs with
// it and build with CGO_ENABLED=0.
package voices

import "avatarsvc/shared/domain"

// Voice is one selectable voice.
type Voice struct {
	// ID is what clients send and what the renderer hands to espeak-ng.
	ID string `json:"voice_id"`
	// Name is for people: the language and, for a variant, its kind.
	Name string `json:"name"`
	// Language is the BCP 47 tag of the language the voice speaks.
	Language string `json:"language"`
}

// Default is the voice used when a client names none.
const Default = "en-us"

// catalogue lists the voices in the order All returns them. espeak-ng
// finds a voice by its file name, which is not always its language code:
// British English is "en" (espeak-ng 1.51 knows no "en-gb" name) and French
// is "fr", not "fr-fr". "+f3" selects espeak's third female variant; an
// unknown variant is silently ignored by espeak-ng, so gpu-fleet/tts checks
// that the one asked for was loaded.
var catalogue = []Voice{
	{ID: "en-us", Name: "English (America)", Language: "en-US"},
	{ID: "en-us+f3", Name: "English (America), female", Language: "en-US"},
	{ID: "en", Name: "English (Great Britain)", Language: "en-GB"},
	{ID: "en+f3", Name: "English (Great Britain), female", Language: "en-GB"},
	{ID: "en-gb-scotland", Name: "English (Scotland)", Language: "en-GB"},
	{ID: "en-gb-x-rp", Name: "English (Received Pronunciation)", Language: "en-GB"},
	{ID: "fr", Name: "French (France)", Language: "fr-FR"},
	{ID: "fr+f3", Name: "French (France), female", Language: "fr-FR"},
	{ID: "de", Name: "German", Language: "de-DE"},
	{ID: "de+f3", Name: "German, female", Language: "de-DE"},
	{ID: "es", Name: "Spanish (Spain)", Language: "es-ES"},
	{ID: "es+f3", Name: "Spanish (Spain), female", Language: "es-ES"},
	{ID: "es-419", Name: "Spanish (Latin America)", Language: "es-419"},
	{ID: "it", Name: "Italian", Language: "it-IT"},
	{ID: "pt", Name: "Portuguese (Portugal)", Language: "pt-PT"},
	{ID: "pt-br", Name: "Portuguese (Brazil)", Language: "pt-BR"},
	{ID: "nl", Name: "Dutch", Language: "nl-NL"},
	{ID: "sv", Name: "Swedish", Language: "sv-SE"},
	{ID: "da", Name: "Danish", Language: "da-DK"},
	{ID: "nb", Name: "Norwegian Bokmål", Language: "nb-NO"},
	{ID: "fi", Name: "Finnish", Language: "fi-FI"},
	{ID: "pl", Name: "Polish", Language: "pl-PL"},
	{ID: "cs", Name: "Czech", Language: "cs-CZ"},
	{ID: "ru", Name: "Russian", Language: "ru-RU"},
	{ID: "uk", Name: "Ukrainian", Language: "uk-UA"},
	{ID: "tr", Name: "Turkish", Language: "tr-TR"},
	{ID: "el", Name: "Greek", Language: "el-GR"},
	{ID: "hi", Name: "Hindi", Language: "hi-IN"},
	{ID: "cmn", Name: "Chinese (Mandarin)", Language: "zh-CN"},
}

var byID = func() map[string]Voice {
	m := make(map[string]Voice, len(catalogue))
	for _, v := range catalogue {
		m[v.ID] = v
	}
	return m
}()

// All returns every voice, the default first. The slice is the caller's.
func All() []Voice {
	return append([]Voice(nil), catalogue...)
}

// Lookup finds a voice by its exact ID. It is case-sensitive: "en-US" is not
// "en-us", so what is stored and sent to the renderer is always the
// catalogue's spelling.
func Lookup(id string) (Voice, bool) {
	v, ok := byID[id]
	return v, ok
}

// Validate answers a voice_id that is set (non-empty) but not in the
// catalogue, where a client sets it.
func Validate(id string) error {
	if id == "" {
		return nil
	}
	if _, ok := Lookup(id); ok {
		return nil
	}
	shown := id
	if len(shown) > 40 {
		shown = shown[:40] + "..."
	}
	return domain.Errorf(domain.Invalid, "Unknown voice_id %q", shown).
		WithSuggestion("GET /v1/voices lists the voices, e.g. " + Default)
}
