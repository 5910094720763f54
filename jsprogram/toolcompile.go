package jsprogram

import (
	"fmt"
	"strings"

	"github.com/dop251/goja"
	"github.com/dop251/goja/ast"
	"github.com/dop251/goja/parser"
)

// scriptName names an authored tool's script in positions and stacks.
const scriptName = "tool.js"

// script is a compiled tool script: the program, and the names of its
// steps (top-level async functions whose body starts with "use step").
type script struct {
	prg   *goja.Program
	steps []string
}

// compileScript compiles a tool script. Each step function gets a guard
// after its directives: in the workflow body, calling it issues a step op
// (the function runs in a step attempt, and replay reuses its recorded
// result); in a step attempt it runs. This is what the Workflow SDK's
// compiler does to a "use step" function. The guard goes on the
// directive's line, so line numbers do not change.
func compileScript(src string) (*script, *WorkflowProgramError) {
	prg, err := parser.ParseFile(nil, scriptName, src, 0, parseOptions...)
	if err != nil {
		return nil, asyncGeneratorHint(syntaxError(err, samePosition), src)
	}
	type insert struct {
		at   int
		text string
	}
	var ins []insert
	var steps []string
	seen := map[string]bool{}
	for _, st := range prg.Body {
		fd, ok := st.(*ast.FunctionDeclaration)
		if !ok || fd.Function.Name == nil || fd.Function.Body == nil {
			continue
		}
		fl := fd.Function
		at, isStep := stepDirective(src, fl.Body)
		if !isStep {
			continue
		}
		name := fl.Name.Name.String()
		pos := prg.File.Position(int(fl.Name.Idx0()) - 1) // Idx is 1-based
		if !fl.Async || fl.Generator {
			return nil, &WorkflowProgramError{Code: CodeSyntaxError, Name: "SyntaxError", Line: pos.Line, Column: pos.Column,
				Message: fmt.Sprintf("SyntaxError: step %s must be an async function, not a generator or a plain function (line %d, column %d)", name, pos.Line, pos.Column)}
		}
		if seen[name] {
			return nil, &WorkflowProgramError{Code: CodeSyntaxError, Name: "SyntaxError", Line: pos.Line, Column: pos.Column,
				Message: fmt.Sprintf("SyntaxError: step %s is declared twice (line %d, column %d)", name, pos.Line, pos.Column)}
		}
		if len(name) > 256 {
			return nil, &WorkflowProgramError{Code: CodeSyntaxError, Name: "SyntaxError", Line: pos.Line, Column: pos.Column,
				Message: fmt.Sprintf("SyntaxError: a step's name must be at most 256 bytes; %s... is %d", name[:32], len(name))}
		}
		seen[name] = true
		steps = append(steps, name)
		ins = append(ins, insert{at, fmt.Sprintf(" if (__sandflow.step) return __sandflow.step(%q, %s, arguments);", name, name)})
	}
	var b strings.Builder
	last := 0
	for _, in := range ins {
		b.WriteString(src[last:in.at])
		b.WriteString(in.text)
		last = in.at
	}
	b.WriteString(src[last:])
	// Parsed again with our options: goja.Compile's defaults would load a
	// source map the script names.
	guarded, err := parser.ParseFile(nil, scriptName, b.String(), 0, parseOptions...)
	if err != nil {
		return nil, syntaxError(err, samePosition)
	}
	p, err := goja.CompileAST(guarded, false)
	if err != nil {
		return nil, syntaxError(err, samePosition)
	}
	return &script{prg: p, steps: steps}, nil
}

// stepDirective reports whether a function body's directive prologue has
// "use step", and where the prologue ends (after its last directive and
// that directive's semicolon).
func stepDirective(src string, body *ast.BlockStatement) (int, bool) {
	end, found := 0, false
	for _, st := range body.List {
		es, ok := st.(*ast.ExpressionStatement)
		if !ok {
			break
		}
		lit, ok := es.Expression.(*ast.StringLiteral)
		if !ok {
			break
		}
		if lit.Value.String() == "use step" {
			found = true
		}
		end = int(lit.Idx1()) - 1 // Idx is 1-based
		for end < len(src) && (src[end] == ' ' || src[end] == '\t') {
			end++
		}
		if end < len(src) && src[end] == ';' {
			end++
		}
	}
	return end, found
}

// asyncGeneratorHint explains the parser's error at the star of an async
// generator (the spec's progress form), which goja does not have.
func asyncGeneratorHint(e *WorkflowProgramError, src string) *WorkflowProgramError {
	if !strings.HasPrefix(e.Message, "SyntaxError: Unexpected token *") || e.Line < 1 {
		return e
	}
	lines := strings.SplitN(src, "\n", e.Line+1)
	if e.Line > len(lines) || e.Column < 1 || e.Column > len(lines[e.Line-1])+1 {
		return e
	}
	// The parser reports the star, or the token after it.
	before := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(lines[e.Line-1][:e.Column-1]), "*"))
	if strings.HasSuffix(before, "async") || strings.HasSuffix(before, "function") {
		e.Message += "; async generators are not supported here: report progress with ctx.progress(value) instead of yield"
	}
	return e
}

// samePosition maps a script's positions: they are the author's.
func samePosition(line, col int) (int, int) { return line, col }

// hasDirective reports whether the source text of a function (what
// Function.prototype.toString gives: a declaration, an expression, an
// arrow function or a method) starts its body with the directive.
func hasDirective(text, directive string) bool {
	// A method's text is not an expression; inside an object literal it is.
	for _, wrap := range [][2]string{{"({", "\n})"}, {"(", "\n)"}} {
		prg, err := parser.ParseFile(nil, "", wrap[0]+text+wrap[1], 0, parseOptions...)
		if err != nil || len(prg.Body) != 1 {
			continue
		}
		es, ok := prg.Body[0].(*ast.ExpressionStatement)
		if !ok {
			continue
		}
		expr := es.Expression
		if ol, ok := expr.(*ast.ObjectLiteral); ok {
			if len(ol.Value) != 1 {
				continue
			}
			pk, ok := ol.Value[0].(*ast.PropertyKeyed)
			if !ok {
				continue
			}
			expr = pk.Value
		}
		var body *ast.BlockStatement
		switch fn := expr.(type) {
		case *ast.FunctionLiteral:
			body = fn.Body
		case *ast.ArrowFunctionLiteral:
			body, _ = fn.Body.(*ast.BlockStatement)
		}
		if body == nil {
			return false
		}
		for _, st := range body.List {
			es, ok := st.(*ast.ExpressionStatement)
			if !ok {
				return false
			}
			lit, ok := es.Expression.(*ast.StringLiteral)
			if !ok {
				return false
			}
			if lit.Value.String() == directive {
				return true
			}
		}
		return false
	}
	return false
}
