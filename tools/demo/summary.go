package demo

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/ellipsis-chat/ellipsis/tools/typist"
)

// WriteSummary writes the per-user table of keystrokes typed against typing
// frames sent (starts, refreshes, stops), and the total ratio.
func (r *Result) WriteSummary(w io.Writer) error {
	// Cells are right-aligned; padding the names left-aligns the first column.
	width := len("total")
	for _, u := range r.Users {
		width = max(width, len(u.ID))
	}
	fmt.Fprintf(w, "\nSummary: room %q, %.1f s, speed %g×\n", r.Room, r.Elapsed.Seconds(), r.Speed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, label("user", width)+"\tkeystrokes\tmessages\tstarts\trefreshes\tstops (idle+sent+end)\ttyping frames\tkeystrokes/frame\treceived\t")
	row := func(name string, s typist.Stats, received int) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d (%d+%d+%d)\t%d\t%s\t%d\t\n",
			label(name, width), s.Keystrokes, s.Messages, s.Starts, s.Refreshes, s.Stops(), s.IdleStops, s.SentStops, s.CancelStops,
			s.Events(), ratio(s.Keystrokes, s.Events()), received)
	}
	recv := 0
	for _, u := range r.Users {
		row(u.ID, u.Sent, u.Received)
		recv += u.Received
	}
	t := r.Total()
	row("total", t, recv)
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("demo: summary: %w", err)
	}
	_, err := fmt.Fprintf(w, "\n%d keystrokes sent %d typing frames: %s keystrokes per frame, %s fewer frames than one per keystroke.\n",
		t.Keystrokes, t.Events(), ratio(t.Keystrokes, t.Events()), saved(t.Keystrokes, t.Events()))
	if err != nil {
		return fmt.Errorf("demo: summary: %w", err)
	}
	return nil
}

func ratio(keys, frames int) string {
	if frames == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(keys)/float64(frames))
}

func saved(keys, frames int) string {
	if keys == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*(1-float64(frames)/float64(keys)))
}
