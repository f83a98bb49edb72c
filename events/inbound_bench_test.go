package events

import "testing"

// BenchmarkMap measures mapping a recorded Revision event to an action, the
// receiver's per-event CPU work before any lookup.
func BenchmarkMap(b *testing.B) {
	for _, name := range []string{"resource/04-revision-update-ready-true.json", "reference/01-revision-add.json"} {
		e := loadFixture(b, name).event(b)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Map(e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
