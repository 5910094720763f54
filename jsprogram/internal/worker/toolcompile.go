package worker

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/sandflow/sandflow/jsprogram/internal/proto"

	"github.com/dop251/goja"
	"github.com/dop251/goja/ast"
	"github.com/dop251/goja/file"
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

// compileScript compiles a tool script. Its steps are the top-level async
// function declarations whose body starts with "use step". The compiler
// adds one statement, run first: [a, b] = __sandflow.steps(["a", a, "b",
// b]), which keeps the declared (hoisted) functions and gives each binding
// a stand-in. In the workflow body a call of the stand-in issues a step op
// (the function runs in a step attempt, and replay reuses its recorded
// result); elsewhere it runs the function. This is what the Workflow SDK's
// compiler does to a "use step" function. The statement's text goes after
// the script's last line, so every position in the script is the
// author's; the statement itself is moved to the front of the program.
// "use step" anywhere else would do nothing, so it is refused.
func compileScript(src string) (*script, *proto.WorkflowProgramError) {
	prg, err := parser.ParseFile(nil, scriptName, src, 0, parseOptions...)
	if err != nil {
		return nil, asyncGeneratorHint(syntaxError(err, samePosition), src)
	}
	at := func(idx file.Idx) file.Position { return prg.File.Position(int(idx) - 1) } // Idx is 1-based
	topLevel := map[*ast.FunctionLiteral]bool{}
	var steps []string
	seen := map[string]bool{}
	for _, st := range prg.Body {
		fd, ok := st.(*ast.FunctionDeclaration)
		if !ok || fd.Function.Name == nil || fd.Function.Body == nil || !hasStepDirective(fd.Function.Body) {
			continue
		}
		fl := fd.Function
		topLevel[fl] = true
		name := fl.Name.Name.String()
		pos := at(fl.Name.Idx0())
		refuse := func(msg string) *proto.WorkflowProgramError {
			return &proto.WorkflowProgramError{Code: proto.CodeSyntaxError, Name: "SyntaxError", Line: pos.Line, Column: pos.Column,
				Message: fmt.Sprintf("SyntaxError: %s (line %d, column %d)", msg, pos.Line, pos.Column)}
		}
		switch {
		case !fl.Async || fl.Generator:
			return nil, refuse(fmt.Sprintf("step %s must be an async function, not a generator or a plain function", name))
		case seen[name]:
			return nil, refuse(fmt.Sprintf("step %s is declared twice", name))
		case len(name) > 256:
			return nil, refuse(fmt.Sprintf("a step's name must be at most 256 bytes; %s... is %d", name[:32], len(name)))
		}
		seen[name] = true
		steps = append(steps, name)
	}
	// A plain declaration of a step's name replaces the step (the later
	// declaration wins the hoisting), so the step could never run.
	for _, st := range prg.Body {
		if fd, ok := st.(*ast.FunctionDeclaration); ok && fd.Function.Name != nil && !topLevel[fd.Function] && seen[fd.Function.Name.Name.String()] {
			pos := at(fd.Function.Name.Idx0())
			return nil, &proto.WorkflowProgramError{Code: proto.CodeSyntaxError, Name: "SyntaxError", Line: pos.Line, Column: pos.Column,
				Message: fmt.Sprintf("SyntaxError: step %s is declared twice: this declaration would replace the step (line %d, column %d)", fd.Function.Name.Name, pos.Line, pos.Column)}
		}
	}
	// "use step" as the script's own directive does nothing.
	for _, st := range prg.Body {
		if !isDirective(st) {
			break
		}
		if st.(*ast.ExpressionStatement).Expression.(*ast.StringLiteral).Value.String() == "use step" {
			return nil, useStepHere(at(st.Idx0()))
		}
	}
	for _, fn := range functionLiterals(prg) {
		var body *ast.BlockStatement
		var start file.Idx
		switch f := fn.(type) {
		case *ast.FunctionLiteral:
			body, start = f.Body, f.Idx0()
			if topLevel[f] {
				continue
			}
		case *ast.ArrowFunctionLiteral:
			body, _ = f.Body.(*ast.BlockStatement)
			start = f.Idx0()
		}
		if body != nil && hasStepDirective(body) {
			return nil, useStepHere(at(start))
		}
	}
	if len(steps) > 0 {
		if prg, err = withStepStandIns(src, prg, steps); err != nil {
			return nil, syntaxError(err, samePosition)
		}
	}
	p, err := goja.CompileAST(prg, false)
	if err != nil {
		return nil, syntaxError(err, samePosition)
	}
	return &script{prg: p, steps: steps}, nil
}

// withStepStandIns parses the script again with the steps' statement
// after its last line, and moves that statement to the front, after the
// script's directives.
func withStepStandIns(src string, prg *ast.Program, steps []string) (*ast.Program, error) {
	var b strings.Builder
	b.WriteString(src)
	// A newline ends a line comment; the semicolon, a last statement
	// without one (a line starting with [ would continue it).
	b.WriteString("\n;[")
	b.WriteString(strings.Join(steps, ", "))
	b.WriteString("] = __sandflow.steps([")
	for i, name := range steps {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q, %s", name, name)
	}
	b.WriteString("]);\n")
	// Parsed with our options: goja.Compile's defaults would load a
	// source map the script names.
	full, err := parser.ParseFile(nil, scriptName, b.String(), 0, parseOptions...)
	if err != nil {
		return nil, err
	}
	n := len(full.Body)
	if n <= len(prg.Body) {
		return nil, fmt.Errorf("the step compiler's statement did not parse as one")
	}
	if _, ok := full.Body[n-1].(*ast.ExpressionStatement); !ok {
		return nil, fmt.Errorf("the step compiler's statement did not parse as one")
	}
	stmt := full.Body[n-1]
	body := full.Body[:n-1]
	d := 0
	for d < len(body) && isDirective(body[d]) {
		d++
	}
	full.Body = append(append(append([]ast.Statement{}, body[:d]...), stmt), body[d:]...)
	return full, nil
}

// useStepHere refuses "use step" where it would do nothing.
func useStepHere(pos file.Position) *proto.WorkflowProgramError {
	return &proto.WorkflowProgramError{Code: proto.CodeSyntaxError, Name: "SyntaxError", Line: pos.Line, Column: pos.Column,
		Message: fmt.Sprintf(`SyntaxError: "use step" has no effect here: a step is a top-level async function declaration, function name() { "use step"; ... } (line %d, column %d)`, pos.Line, pos.Column)}
}

func isDirective(st ast.Statement) bool {
	es, ok := st.(*ast.ExpressionStatement)
	if !ok {
		return false
	}
	_, ok = es.Expression.(*ast.StringLiteral)
	return ok
}

// hasStepDirective reports whether a function body's directive prologue
// has "use step".
func hasStepDirective(body *ast.BlockStatement) bool {
	for _, st := range body.List {
		if !isDirective(st) {
			return false
		}
		if st.(*ast.ExpressionStatement).Expression.(*ast.StringLiteral).Value.String() == "use step" {
			return true
		}
	}
	return false
}

var astPkg = reflect.TypeFor[ast.Program]().PkgPath()

// functionLiterals lists every function and arrow function in a program,
// walking its syntax tree without recursion (a script can nest deeply).
func functionLiterals(prg *ast.Program) []ast.Node {
	var out []ast.Node
	type node struct {
		t reflect.Type
		p uintptr
	}
	seen := map[node]bool{}
	stack := []reflect.Value{reflect.ValueOf(prg)}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch v.Kind() {
		case reflect.Interface:
			if !v.IsNil() {
				stack = append(stack, v.Elem())
			}
		case reflect.Pointer:
			k := node{v.Type(), v.Pointer()}
			if v.IsNil() || v.Type().Elem().Kind() != reflect.Struct || v.Type().Elem().PkgPath() != astPkg || seen[k] {
				continue
			}
			seen[k] = true
			switch n := v.Interface().(type) {
			case *ast.FunctionLiteral:
				out = append(out, n)
			case *ast.ArrowFunctionLiteral:
				out = append(out, n)
			}
			stack = append(stack, v.Elem())
		case reflect.Struct:
			if v.Type().PkgPath() != astPkg {
				continue
			}
			for i := 0; i < v.NumField(); i++ {
				if v.Type().Field(i).IsExported() {
					stack = append(stack, v.Field(i))
				}
			}
		case reflect.Slice:
			for i := v.Len() - 1; i >= 0; i-- {
				stack = append(stack, v.Index(i))
			}
		}
	}
	return out
}

// asyncGeneratorHint explains the parser's error at the star of an async
// generator (the async-generator form of progress), which goja does not have.
func asyncGeneratorHint(e *proto.WorkflowProgramError, src string) *proto.WorkflowProgramError {
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
