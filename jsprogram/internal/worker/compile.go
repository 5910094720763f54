package worker

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sandflow/sandflow/jsprogram/internal/proto"

	"github.com/dop251/goja"
	"github.com/dop251/goja/ast"
	"github.com/dop251/goja/parser"
)

// fileName names the program in positions and stacks.
const fileName = "workflow.js"

// bodyPrefix opens the function the program's body goes in. It shares the
// body's first line, so line numbers need no adjusting; columns on line 1
// are shifted by its length.
const bodyPrefix = "(async function (ctx) {"

// parseOptions are the parser options of every program. Source maps are
// off: the parser would otherwise read the file a sourceMappingURL comment
// names, from the host's disk.
var parseOptions = []parser.Option{parser.WithDisableSourceMaps}

// compileBody compiles an async function body. The result evaluates to the
// function. A syntax error, or a body that closes the function early to
// add code around it, is a *proto.WorkflowProgramError with the position in the
// body.
func compileBody(js string) (*goja.Program, *proto.WorkflowProgramError) {
	src := bodyPrefix + js + "\n})"
	prg, err := parser.ParseFile(nil, fileName, src, 0, parseOptions...)
	if err != nil {
		return nil, bodyEndsEarly(syntaxError(err, bodyPosition), js)
	}
	if len(prg.Body) != 1 {
		return nil, notABody(prg, src, 1)
	}
	es, ok := prg.Body[0].(*ast.ExpressionStatement)
	if !ok {
		return nil, notABody(prg, src, 0)
	}
	fl, ok := es.Expression.(*ast.FunctionLiteral)
	if !ok || !fl.Async || int(fl.Idx0()) != 2 || int(fl.Idx1()) != len(src) {
		return nil, notABody(prg, src, 0)
	}
	p, err := goja.CompileAST(prg, false)
	if err != nil {
		return nil, syntaxError(err, bodyPosition)
	}
	return p, nil
}

func notABody(prg *ast.Program, src string, stmt int) *proto.WorkflowProgramError {
	e := &proto.WorkflowProgramError{Code: proto.CodeSyntaxError, Name: "SyntaxError",
		Message: "SyntaxError: the program must be the body of an async function; it closes the function early"}
	if stmt < len(prg.Body) {
		pos := prg.File.Position(int(prg.Body[stmt].Idx0()) - 1) // Idx is 1-based
		e.Line, e.Column = bodyPosition(pos.Line, pos.Column)
	}
	return e
}

// bodyEndsEarly rewrites a syntax error the parser found in the wrapper's
// closing "})", past the body's last line: the body ended before a
// statement or expression did (return {, an unclosed call). Its position
// is then the end of the body, and its message says so; the wrapper's
// token means nothing to the program's author.
func bodyEndsEarly(e *proto.WorkflowProgramError, js string) *proto.WorkflowProgramError {
	lastLine := strings.Count(js, "\n") + 1
	if e.Line <= lastLine {
		return e
	}
	last := js[strings.LastIndexByte(js, '\n')+1:]
	e.Line, e.Column = lastLine, len(last)+1
	if lastLine == 1 {
		e.Column = len(js) + 1
	}
	e.Message = fmt.Sprintf("SyntaxError: unexpected end of the program: a statement or expression is not finished (line %d, column %d)", e.Line, e.Column)
	return e
}

// bodyPosition maps a position in the wrapped source to the body.
func bodyPosition(line, col int) (int, int) {
	if line == 1 {
		col -= len(bodyPrefix)
		if col < 1 {
			col = 1
		}
	}
	return line, col
}

// syntaxError describes a parse or compile error, with its position
// mapped by at.
func syntaxError(err error, at func(line, col int) (int, int)) *proto.WorkflowProgramError {
	e := &proto.WorkflowProgramError{Code: proto.CodeSyntaxError, Name: "SyntaxError"}
	var pe *parser.Error
	switch x := err.(type) {
	case parser.ErrorList:
		if len(x) > 0 {
			pe = x[0]
		}
	case *parser.Error:
		pe = x
	case *goja.CompilerSyntaxError:
		e.Message = "SyntaxError: " + x.Message
		if x.File != nil {
			p := x.File.Position(x.Offset)
			e.Line, e.Column = at(p.Line, p.Column)
		}
		return e
	}
	if pe == nil {
		e.Message = "SyntaxError: " + err.Error()
		return e
	}
	e.Line, e.Column = at(pe.Position.Line, pe.Position.Column)
	e.Message = fmt.Sprintf("SyntaxError: %s (line %d, column %d)", pe.Message, e.Line, e.Column)
	return e
}

var stackPos = regexp.MustCompile(regexp.QuoteMeta(fileName) + `:(\d+):(\d+)`)

// bodyStack rewrites a stack's positions to the body's, and returns the
// first one.
func bodyStack(stack string) (string, int, int) {
	line, col := 0, 0
	out := stackPos.ReplaceAllStringFunc(stack, func(m string) string {
		sub := stackPos.FindStringSubmatch(m)
		l, _ := strconv.Atoi(sub[1])
		c, _ := strconv.Atoi(sub[2])
		l, c = bodyPosition(l, c)
		if line == 0 {
			line, col = l, c
		}
		return fmt.Sprintf("%s:%d:%d", fileName, l, c)
	})
	// The wrapper's own frames mean nothing to the program's author.
	out = strings.ReplaceAll(out, "\tat <anonymous>", "\tat <program>")
	return out, line, col
}
