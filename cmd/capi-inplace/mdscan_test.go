package main

import (
	"regexp"
	"strconv"
	"strings"
)

// The Markdown side of the docs tests: where a doc names a command line, a flag,
// an annotation key or a policy key. It reads CommonMark's fenced code blocks and
// code spans (a span may cross lines within a paragraph); everything else is prose.

// word is one whitespace-separated word of a command line and the doc line it is on.
type word struct {
	text string
	line int
}

// commandLine is a command as a doc writes it: in a shell code block (one
// logical line, `\` continuations joined, split at |, &&, || and ;) or in a code
// span. Loose is true for text that is not a command line (prose, output and
// YAML blocks): its flags can be attributed to no program. AboutPolicy is true
// for a code span whose paragraph speaks of the policy in its prose. Unit
// names the part of its paragraph a code span is in: the paragraph, one item
// of a list, or one cell of a table ("" outside prose); the spans of one unit
// speak of one thing.
type commandLine struct {
	tokens      []word
	loose       bool
	aboutPolicy bool
	unit        string
}

// codeBlock is a fenced code block: its info string's language and its lines.
type codeBlock struct {
	lang  string
	first int // line of the first content line
	lines []string
}

// tableRow is a table's row: its first cell (the key a reference table names)
// and its line.
type tableRow struct {
	first string
	line  int
}

// mdTable is a table (consecutive lines starting with |, the delimiter row
// left out) and the text of the last heading above it.
type mdTable struct {
	heading string
	rows    []tableRow
}

// markdownDoc is a doc split into code blocks, command lines, tables and prose.
type markdownDoc struct {
	blocks   []codeBlock
	commands []commandLine
	tables   []mdTable
}

var (
	fence    = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")
	codeSpan = regexp.MustCompile("`([^`]+)`")
	// looseFlag is a long flag written anywhere: --name, after a character that
	// cannot be part of a word or a longer dash run.
	looseFlag = regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])(--[a-z][a-z0-9-]*)`)
	// policyWord is the policy named in prose.
	policyWord = regexp.MustCompile(`(?i)\bpolic(y|ies)\b`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*)$`)
	tableDelim = regexp.MustCompile(`^\|?[\s:|-]+$`)
)

// shellLangs are the code blocks whose lines are commands.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true, "shell-session": true}

func parseMarkdown(text string) markdownDoc {
	var d markdownDoc
	lines := strings.Split(text, "\n")
	var prose []string // the current paragraph's lines
	proseStart, para := 0, 0
	flushProse := func() {
		if len(prose) > 0 {
			para++
			for _, c := range proseCommands(strings.Join(prose, "\n"), proseStart) {
				if c.unit != "" {
					c.unit = strconv.Itoa(para) + "/" + c.unit
				}
				d.commands = append(d.commands, c)
			}
		}
		prose = nil
	}
	section := "" // the last heading's text
	inTable := false
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			if h := heading.FindStringSubmatch(lines[i]); h != nil {
				section = h[1]
			}
			trimmed := strings.TrimSpace(lines[i])
			switch {
			case !strings.HasPrefix(trimmed, "|"):
				inTable = false
			case tableDelim.MatchString(trimmed):
			default:
				if !inTable {
					d.tables = append(d.tables, mdTable{heading: section})
					inTable = true
				}
				t := &d.tables[len(d.tables)-1]
				t.rows = append(t.rows, tableRow{first: firstCell(trimmed), line: i + 1})
			}
			if trimmed == "" {
				flushProse()
				continue
			}
			if len(prose) == 0 {
				proseStart = i + 1
			}
			prose = append(prose, lines[i])
			continue
		}
		flushProse()
		inTable = false
		b := codeBlock{lang: m[2], first: i + 2}
		for i++; i < len(lines); i++ {
			if strings.HasPrefix(strings.TrimSpace(lines[i]), m[1][:3]) {
				break
			}
			b.lines = append(b.lines, lines[i])
		}
		d.blocks = append(d.blocks, b)
		if shellLangs[b.lang] {
			d.commands = append(d.commands, shellCommands(b)...)
			continue
		}
		for j, l := range b.lines {
			d.commands = append(d.commands, commandLine{tokens: tokenize(l, b.first+j), loose: true})
		}
	}
	flushProse()
	return d
}

// firstCell is the first cell of a table row: up to the first | that is
// neither escaped nor in a code span.
func firstCell(row string) string {
	row = strings.TrimPrefix(row, "|")
	inCode := false
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '`':
			inCode = !inCode
		case row[i] == '\\':
			i++
		case row[i] == '|' && !inCode:
			return strings.TrimSpace(row[:i])
		}
	}
	return strings.TrimSpace(row)
}

// proseCommands are a paragraph's code spans, each a command line, and the rest
// of its text as one loose line.
func proseCommands(text string, first int) []commandLine {
	var out []commandLine
	lineAt := func(offset int) int { return first + strings.Count(text[:offset], "\n") }
	rest := []byte(text)
	units := proseUnits(text)
	for _, loc := range codeSpan.FindAllStringSubmatchIndex(text, -1) {
		out = append(out, commandLine{tokens: tokenizeAt(text[loc[2]:loc[3]], loc[2], lineAt), unit: units(loc[0])})
		for k := loc[0]; k < loc[1]; k++ {
			if rest[k] != '\n' {
				rest[k] = ' '
			}
		}
	}
	aboutPolicy := policyWord.Match(rest)
	for i := range out {
		out[i].aboutPolicy = aboutPolicy
	}
	return append(out, commandLine{tokens: tokenizeAt(string(rest), 0, lineAt), loose: true})
}

// listItem starts an item of a Markdown list.
var listItem = regexp.MustCompile(`^\s*(?:[-*+]|[0-9]+[.)])\s`)

// proseUnits maps an offset of a paragraph's text to its unit: the list item
// (by the line it starts on) and, in a table row, the cell.
func proseUnits(text string) func(offset int) string {
	type line struct{ start, item int }
	var lines []line
	item := 0
	for i, start := 0, 0; start <= len(text); i++ {
		end := strings.IndexByte(text[start:], '\n')
		if end < 0 {
			end = len(text) - start
		}
		l := text[start : start+end]
		if listItem.MatchString(l) || strings.HasPrefix(strings.TrimSpace(l), "|") {
			item = i
		}
		lines = append(lines, line{start: start, item: item})
		start += end + 1
	}
	return func(offset int) string {
		i := 0
		for i+1 < len(lines) && lines[i+1].start <= offset {
			i++
		}
		row := text[lines[i].start:offset]
		cell := 0
		if strings.HasPrefix(strings.TrimSpace(row), "|") {
			inCode := false
			for k := 0; k < len(row); k++ {
				switch {
				case row[k] == '`':
					inCode = !inCode
				case row[k] == '\\':
					k++
				case row[k] == '|' && !inCode:
					cell++
				}
			}
		}
		return strconv.Itoa(lines[i].item) + "/" + strconv.Itoa(cell)
	}
}

// shellCommands are a shell block's commands: `\` continues a line, # starts a
// comment, and |, &&, || and ; separate commands.
func shellCommands(b codeBlock) []commandLine {
	var out []commandLine
	var cur []word
	end := func() {
		if len(cur) > 0 {
			out = append(out, commandLine{tokens: cur})
		}
		cur = nil
	}
	for j, l := range b.lines {
		continued := strings.HasSuffix(strings.TrimRight(l, " \t"), `\`)
		for _, tk := range tokenize(l, b.first+j) {
			if strings.HasPrefix(tk.text, "#") {
				break
			}
			switch tk.text {
			case `\`:
				continue
			case "|", "||", "&&", ";", "&":
				end()
				continue
			}
			semi := strings.HasSuffix(tk.text, ";")
			tk.text = strings.TrimSuffix(tk.text, ";")
			cur = append(cur, tk)
			if semi {
				end()
			}
		}
		if !continued {
			end()
		}
	}
	end()
	return out
}

func tokenize(s string, line int) []word {
	return tokenizeAt(s, 0, func(int) int { return line })
}

// tokenizeAt splits s at white space; lineAt maps an offset of the text s was
// cut from (s starts at base) to its doc line. Quotes around a word are dropped.
func tokenizeAt(s string, base int, lineAt func(int) int) []word {
	var out []word
	start := -1
	for i := 0; i <= len(s); i++ {
		if i < len(s) && !strings.ContainsRune(" \t\n", rune(s[i])) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			w := strings.Trim(s[start:i], `"'(),`)
			if w != "" {
				out = append(out, word{text: w, line: lineAt(base + start)})
			}
			start = -1
		}
	}
	return out
}
