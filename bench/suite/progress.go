package suite

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// progress shows how far a suite run is. On a terminal it is one line,
// redrawn in place: "[#####.....] 12/80 replay/wazero/n=1000 (2/5)",
// cleared before each result line is printed (results and progress share
// the terminal). Elsewhere it writes a line as each run starts.
type progress struct {
	w     io.Writer
	tty   bool
	total int
	n     int    // runs finished or given up
	line  string // what the bar shows after the count
}

const barWidth = 30

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, tty: isTerminal(w), total: total}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// start shows that run i of count of the figure key begins.
func (p *progress) start(key string, i, count int) {
	if p.w == nil {
		return
	}
	p.line = key
	if count > 1 {
		p.line += fmt.Sprintf(" (%d/%d)", i, count)
	}
	if p.tty {
		p.draw()
		return
	}
	fmt.Fprintf(p.w, "[%d/%d] %s\n", p.n+1, p.total, p.line)
}

func (p *progress) draw() {
	filled := 0
	if p.total > 0 {
		filled = p.n * barWidth / p.total
	}
	bar := strings.Repeat("#", filled) + strings.Repeat(".", barWidth-filled)
	// \x1b[K clears what a longer line left.
	fmt.Fprintf(p.w, "\r[%s] %d/%d %s\x1b[K", bar, p.n, p.total, p.line)
}

// clear erases the bar, so that a line can be printed on the terminal.
func (p *progress) clear() {
	if p.w != nil && p.tty {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}

// note prints a message on a line of its own.
func (p *progress) note(msg string) {
	if p.w == nil {
		return
	}
	p.clear()
	fmt.Fprintln(p.w, msg)
}

// done counts a run as finished and redraws the bar.
func (p *progress) done() {
	p.n++
	if p.w != nil && p.tty {
		p.draw()
	}
}

// skipRuns counts runs that will not happen (a figure skipped or failed).
func (p *progress) skipRuns(n int) { p.n += n }

// finish leaves the terminal on a clean line.
func (p *progress) finish() { p.clear() }
