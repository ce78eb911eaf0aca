package cli

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

func (a *app) filesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "files",
		Aliases: []string{"file", "f"},
		Short:   "List, download and upload a session's (or a process's) workspace files",
		Long: `Work with the files of a session's workspace, or with --process of the workspace
of a process started with its own sandbox (agentbox processes start; kept after
it ends until it is deleted or forgotten). Paths are relative to the workspace
root ("." is the root); one that leaves it (absolute, "..", a symlink pointing
out) is refused, and so is a change the sandbox's commit would drop (a
protected path such as CLAUDE.md, anything in .git). While the sandbox runs,
reads show the workspace as it sees it now and changes are made inside it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var process bool
	cmd.PersistentFlags().BoolVar(&process, "process", false, "the first argument is a process's id or tag, not a session's")
	target := func(id string) string {
		if process {
			return client.ProcessWorkspace(id)
		}
		return id
	}
	cmd.AddCommand(a.filesLsCmd(target), a.filesGetCmd(target), a.filesPutCmd(target))
	return cmd
}

func (a *app) filesLsCmd(target func(string) string) *cobra.Command {
	var depth int
	cmd := &cobra.Command{
		Use:     "ls SESSION|PROCESS [PATH]",
		Aliases: []string{"list"},
		Short:   "List a workspace directory",
		Example: `  agentbox files ls ses_0190...
  agentbox files ls ses_0190... src --depth 3 --json
  agentbox files ls --process prc_0190...`,
		Args: usageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			p := "."
			if len(args) == 2 {
				p = args[1]
			}
			l, err := c.ListFiles(cmd.Context(), target(args[0]), p, depth)
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.jsonTerminal(cmd.OutOrStdout()), l)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			for _, e := range l.Entries {
				name := termSafe(e.Path)
				if e.Type == "dir" {
					name += "/"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", e.Type, e.Mode, e.Size, e.MTime.Local().Format("2006-01-02 15:04"), name)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if l.Truncated {
				fmt.Fprintln(cmd.ErrOrStderr(), "(truncated: the daemon lists at most so many entries; list a subdirectory)")
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&depth, "depth", 1, "levels to list (1: the directory's entries)")
	return cmd
}

func (a *app) filesGetCmd(target func(string) string) *cobra.Command {
	var out string
	var archive bool
	var offset, length int64
	cmd := &cobra.Command{
		Use:   "get SESSION|PROCESS PATH",
		Short: "Download a workspace file (or, with --archive, a tree as tar)",
		Example: `  agentbox files get ses_0190... src/main.go
  agentbox files get ses_0190... src/main.go -o main.go
  agentbox files get ses_0190... . --archive -o workspace.tar
  agentbox files get --process build out/report.txt`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if archive && (offset != 0 || length != 0) {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--offset and --length read a file, not an --archive (see %s --help)", cmd.CommandPath())}
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			var r io.ReadCloser
			if archive {
				r, err = c.DownloadArchive(cmd.Context(), target(args[0]), args[1])
			} else {
				r, err = c.ReadFile(cmd.Context(), target(args[0]), args[1], offset, length)
			}
			if err != nil {
				return err
			}
			defer r.Close()
			if out == "" || out == "-" {
				_, err = io.Copy(cmd.OutOrStdout(), r)
				return err
			}
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(f, r); err != nil {
				return err
			}
			return f.Close()
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "output", "o", "", "write to this file instead of stdout")
	f.BoolVar(&archive, "archive", false, "download the tree at PATH as a tar stream")
	f.Int64Var(&offset, "offset", 0, "the first byte to read")
	f.Int64Var(&length, "length", 0, "bytes to read at most (0: to the end)")
	return cmd
}

func (a *app) filesPutCmd(target func(string) string) *cobra.Command {
	var archive bool
	cmd := &cobra.Command{
		Use:   "put SESSION|PROCESS LOCAL PATH",
		Short: "Upload a file, a directory or a tar into the workspace",
		Long: `Upload LOCAL to PATH in the session's workspace: a file ("-" is stdin) is written
at PATH; a directory is sent as a tar of its files, directories and symlinks and
unpacked into PATH; with --archive, LOCAL is a tar stream unpacked into PATH.
An upload that has a refused entry applies nothing.`,
		Example: `  agentbox files put ses_0190... notes.md docs/notes.md
  agentbox files put ses_0190... ./repo .
  git archive HEAD | agentbox files put ses_0190... - . --archive`,
		Args: usageArgs(cobra.ExactArgs(3)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, local, p := target(args[0]), args[1], args[2]
			var data []byte
			var err error
			dir := false
			switch local {
			case "-":
				data, err = io.ReadAll(cmd.InOrStdin())
			default:
				var fi fs.FileInfo
				if fi, err = os.Stat(local); err == nil && fi.IsDir() {
					if archive {
						return &ExitError{Code: ExitUsage, Err: errors.New("--archive takes a tar file or -, not a directory")}
					}
					dir = true
					data, err = tarDir(local)
				} else if err == nil {
					data, err = os.ReadFile(local)
				}
			}
			if err != nil {
				return err
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			var e client.FileEntry
			if archive || dir {
				e, err = c.UploadArchive(cmd.Context(), id, p, data)
			} else {
				e, err = c.WriteFile(cmd.Context(), id, p, data)
			}
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.jsonTerminal(cmd.OutOrStdout()), e)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s (%d bytes sent)\n", e.Type, termSafe(e.Path), len(data))
			return nil
		},
	}
	cmd.Flags().BoolVar(&archive, "archive", false, "LOCAL is a tar stream to unpack into PATH")
	return cmd
}

// tarDir makes a tar of the directory dir: its files, directories and
// symlinks (as links), names relative to it; anything else is left out.
func tarDir(dir string) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Mode &= 0o777
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, fi.Size())
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
