package httpapi

import (
	"net/http"

	"avatarsvc/shared/voices"
)

// handleListVoices lists the text-to-speech voices a voice_id may name.
func handleListVoices() handlerFunc {
	type response struct {
		Success bool           `json:"success"`
		Default string         `json:"default"`
		Voices  []voices.Voice `json:"voices"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		encode(w, http.StatusOK, response{Success: true, Default: voices.Default, Voices: voices.All()})
		return nil
	}
}
