# The documentation says what the product does; this test holds it to that.
#
# 1. The psql tour: the ```sql blocks between <!-- tour:begin --> and
#    <!-- tour:end --> (one pair, in README.md or a file of docs/) run, in
#    order, as one psql script (psql -X -v ON_ERROR_STOP=1 -f) on a fresh
#    database with jobq, and what psql prints for each block must equal the
#    ```text block that follows it (trailing blanks aside; a block without
#    one must print nothing).  Nothing is masked: the tour shows no value
#    that changes from run to run.
# 2. The reference tables of docs/reference.md against the catalog: every
#    function signature in a table whose first column is "function" (or
#    "view / function") has a function with those argument names, types and
#    defaults, and what it returns (a TABLE's column names and types); every
#    function in schema jobq is in such a table; every view's column list
#    (tables with a "columns" column) is the view's columns, in order, and
#    every view is listed; "`jobq.X` columns:" tables name exactly X's
#    columns; the queue settings table names exactly jobq.configure's
#    settings, with the defaults a new queue gets; the health table names
#    jobq.health()'s checks in order; the GUC table names exactly the jobq.*
#    settings, with their defaults and contexts.  Each of these tables must
#    be there: a reference that lost one fails.
# 3. Links: every relative link in README.md, docs/*.md and src/README.md
#    names a file that exists and, with a #fragment, a heading's GitHub
#    anchor in it (outside code blocks, so every code block must be closed);
#    README.md has a table of contents, and every file that has
#    one (between <!-- toc:begin --> and <!-- toc:end -->) lists each of its
#    "## " sections.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use File::Basename qw(dirname);
use File::Spec;
use FindBin;

my $root = File::Spec->rel2abs("$FindBin::RealBin/../..");

# the file's lines
sub read_lines
{
	my ($path) = @_;
	open my $fh, '<:encoding(UTF-8)', $path or die "cannot open $path: $!";
	my @lines = <$fh>;
	close $fh;
	chomp @lines;
	return @lines;
}

# the documents: README.md, docs/*.md, src/README.md (paths relative to $root)
opendir(my $dh, "$root/docs") or die "cannot open $root/docs: $!";
my @docs = ('README.md', (map { "docs/$_" } sort grep { /\.md$/ } readdir $dh), 'src/README.md');
closedir $dh;
my %lines = map { $_ => [ read_lines("$root/$_") ] } @docs;
my $refdoc = 'docs/reference.md';
ok($lines{$refdoc}, "$refdoc exists") or die "no $refdoc";

# fenced code blocks of a range of lines: { lang, text, line }
sub fenced_blocks
{
	my ($first, @lines) = @_;
	my (@blocks, $cur);
	for my $i (0 .. $#lines)
	{
		my $l = $lines[$i];
		if (!$cur && $l =~ /^```(\S*)\s*$/)
		{
			$cur = { lang => $1, text => '', line => $first + $i + 1 };
		}
		elsif ($cur && $l =~ /^```\s*$/)
		{
			push @blocks, $cur;
			undef $cur;
		}
		elsif ($cur)
		{
			$cur->{text} .= "$l\n";
		}
	}
	die "unclosed code block at line $cur->{line}" if $cur;
	return @blocks;
}

# trailing blanks of every line and blank lines at both ends removed
sub normalize
{
	my ($s) = @_;
	$s =~ s/[ \t]+$//mg;
	$s =~ s/\A\n+//;
	$s =~ s/\n+\z//;
	return $s;
}

my $node = PostgreSQL::Test::Cluster->new('readme');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'jobq'\n");
$node->start;

# ---------------------------------------------------------------- the tour

# the one document with the tour, and its lines
my (@begin, @end, $tourdoc);
for my $doc (@docs)
{
	my $l = $lines{$doc};
	my @b = grep { $l->[$_] =~ /^<!-- tour:begin -->\s*$/ } 0 .. $#$l;
	my @e = grep { $l->[$_] =~ /^<!-- tour:end -->\s*$/ } 0 .. $#$l;
	next unless @b || @e;
	push @begin, @b;
	push @end, @e;
	$tourdoc = $doc;
}
is(scalar(@begin) . ' ' . scalar(@end), '1 1', 'the docs have one tour:begin and one tour:end, in one file')
  or die 'cannot find the tour';
cmp_ok($begin[0], '<', $end[0], "$tourdoc: tour:begin comes before tour:end") or die 'tour markers out of order';
my @tourlines = @{ $lines{$tourdoc} };
my @tour = fenced_blocks($begin[0] + 1, @tourlines[ $begin[0] + 1 .. $end[0] - 1 ]);

# pair every sql block with the text block after it, if any
my @steps;
for my $b (@tour)
{
	if ($b->{lang} eq 'sql')
	{
		push @steps, { sql => $b->{text}, line => $b->{line}, want => undef };
	}
	elsif ($b->{lang} eq 'text' && @steps && !defined $steps[-1]{want})
	{
		$steps[-1]{want} = $b->{text};
	}
	else
	{
		fail("tour block at $tourdoc line $b->{line}: a ```$b->{lang} block that does not follow a ```sql block");
	}
}
# a tour that lost its blocks would pass vacuously
cmp_ok(scalar(@steps), '>=', 15, 'the tour has its sql blocks');
cmp_ok(scalar(grep { defined $_->{want} } @steps), '>=', 15, 'the tour shows its results');

$node->safe_psql('postgres', 'CREATE DATABASE tour');
$node->safe_psql('tour', 'CREATE EXTENSION jobq');
# the tour's health check expects the database's worker to have started
$node->poll_query_until('tour', q{
	SELECT count(*) = 1 FROM jobq.workers
	 WHERE role = 'worker' AND database = current_database()})
  or die 'no jobq worker started for database tour';

my $script = '';
for my $i (0 .. $#steps)
{
	$script .= "\\echo '<<tour step $i>>'\n$steps[$i]{sql}";
}
my $file = PostgreSQL::Test::Utils::tempdir() . '/tour.sql';
open my $fh, '>', $file or die "cannot write $file: $!";
print $fh $script;
close $fh;

my ($out, $err) = ('', '');
my $ok = IPC::Run::run(
	[ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('tour'), '-f', $file ],
	'<', \undef, '>', \$out, '2>', \$err);
ok($ok, 'the tour runs without error') or diag("psql failed:\n$err");
is($err, '', 'the tour prints nothing on stderr');

my %got;
my $cur;
for my $l (split /\n/, $out, -1)
{
	if ($l =~ /^<<tour step (\d+)>>$/)
	{
		$cur = $1;
		$got{$cur} = '';
	}
	elsif (defined $cur)
	{
		$got{$cur} .= "$l\n";
	}
}
for my $i (0 .. $#steps)
{
	is( normalize($got{$i} // '<not run>'),
		normalize($steps[$i]{want} // ''),
		"tour step at $tourdoc line $steps[$i]{line} prints what $tourdoc shows");
}

# ------------------------------------------------- reference vs. catalog

# markdown tables outside code blocks: { line, header => [...], rows => [[...]], before }
sub md_tables
{
	my @lines = @_;
	my (@tables, $in_code);
	for (my $i = 0; $i <= $#lines; $i++)
	{
		if ($lines[$i] =~ /^\s*```/) { $in_code = !$in_code; next; }
		next if $in_code || $lines[$i] !~ /^\|/;
		my $start = $i;
		my @rows;
		while ($i <= $#lines && $lines[$i] =~ /^\|/)
		{
			my $l = $lines[$i];
			$l =~ s/^\|//;
			$l =~ s/\|\s*$//;
			push @rows, [ map { s/^\s+|\s+$//gr } split /\|/, $l, -1 ];
			$i++;
		}
		$i--;    # the for loop's $i++ goes on with the line after the table
		my $header = shift @rows;
		shift @rows;    # the |---| line
		my $j = $start - 1;
		$j-- while $j >= 0 && $lines[$j] =~ /^\s*$/;
		push @tables,
		  { line => $start + 1, header => $header, rows => \@rows, before => $j >= 0 ? $lines[$j] : '' };
	}
	return @tables;
}

my @tables = md_tables(@{ $lines{$refdoc} });

# the catalog: functions (name, argument names, types, defaults, result)
my %canon_type;    # the reference's type name -> format_type
sub canon
{
	my ($t) = @_;
	$t =~ s/^\s+|\s+$//g;
	$canon_type{$t} //= $node->safe_psql('tour', "SELECT '$t'::regtype::text");
	return $canon_type{$t};
}

my @procs;
for my $row (split /\n/, $node->safe_psql('tour', q{
	SELECT p.proname,
	       coalesce(array_to_string(ARRAY(
	           SELECT coalesce(p.proargnames[i], '') || ':' || format_type(t, NULL)
	             FROM unnest(coalesce(p.proallargtypes, p.proargtypes::oid[]))
	                  WITH ORDINALITY AS a(t, i)
	            WHERE coalesce(p.proargmodes[i], 'i') IN ('i', 'b', 'v')
	            ORDER BY i), ','), ''),
	       p.pronargdefaults,
	       coalesce(array_to_string(ARRAY(
	           SELECT p.proargnames[i] || ':' || format_type(t, NULL)
	             FROM unnest(p.proallargtypes) WITH ORDINALITY AS a(t, i)
	            WHERE p.proargmodes[i] = 't'
	            ORDER BY i), ','), ''),
	       CASE WHEN p.proretset THEN 'setof ' ELSE '' END || format_type(p.prorettype, NULL)
	  FROM pg_proc p
	 WHERE p.pronamespace = 'jobq'::regnamespace
	 ORDER BY 1, 2}))
{
	my ($name, $args, $ndefaults, $outs, $ret) = split /\|/, $row, -1;
	push @procs,
	  { name => "jobq.$name", args => $args, ndefaults => $ndefaults, outs => $outs, ret => $ret, seen => 0 };
}
cmp_ok(scalar(@procs), '>=', 30, 'the catalog lists jobq\'s functions');

# view columns, in order
my %views;
for my $row (split /\n/, $node->safe_psql('tour', q{
	SELECT c.relname, string_agg(a.attname, ',' ORDER BY a.attnum)
	  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	 WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind = 'v'
	 GROUP BY 1}))
{
	my ($v, $cols) = split /\|/, $row;
	$views{"jobq.$v"} = $cols;
}
my %view_seen;

# split "a type, b type DEFAULT x" at top-level commas
sub split_args
{
	my ($s) = @_;
	my (@parts, $depth, $q);
	my $cur = '';
	$depth = 0;
	for my $c (split //, $s)
	{
		if ($q) { $q = 0 if $c eq "'"; $cur .= $c; next; }
		if ($c eq "'") { $q = 1; $cur .= $c; next; }
		$depth++ if $c eq '(' || $c eq '[';
		$depth-- if $c eq ')' || $c eq ']';
		if ($c eq ',' && $depth == 0) { push @parts, $cur; $cur = ''; next; }
		$cur .= $c;
	}
	push @parts, $cur if $cur =~ /\S/;
	return map { s/^\s+|\s+$//gr } @parts;
}

# "name type [DEFAULT x]" items -> ("name:canonical type", ...), number with DEFAULT
sub parse_args
{
	my ($s) = @_;
	my (@out, $ndef);
	$ndef = 0;
	for my $a (split_args($s))
	{
		my ($name, $type, $def) = $a =~ /^(\w+)\s+(.+?)(\s+DEFAULT\s+.*)?$/
		  or return ("unparseable argument '$a'");
		push @out, "$name:" . canon($type);
		$ndef++ if $def;
	}
	return (join(',', @out), $ndef);
}

# "name:type,name:type" -> "name,name"
sub names_of
{
	my ($list) = @_;
	return join(',', map { (split /:/)[0] } split /,/, $list);
}

# a column list cell: names, each maybe followed by a (remark)
sub column_list
{
	my ($cell) = @_;
	$cell =~ s/`//g;
	1 while $cell =~ s/\([^()]*\)//g;
	my @names = map { s/^\s+|\s+$//gr } split /,/, $cell;
	return join(',', @names);
}

my $ncheck = 0;
my %kind_seen;    # settings, health, GUC, view tables found
for my $t (@tables)
{
	my @h = @{ $t->{header} };
	my ($ret_i) = grep { $h[$_] eq 'returns' } 0 .. $#h;
	my ($col_i) = grep { $h[$_] eq 'columns' } 0 .. $#h;

	# "`jobq.X` columns:" followed by a | column | meaning | table
	if ($t->{before} =~ /^`(jobq\.\w+)(?:\(\))?` columns:$/)
	{
		my $v = $1;
		my @names = sort map { split /\s*,\s*/, ($_->[0] =~ s/`//gr) } @{ $t->{rows} };
		my @want = sort split /,/, ($views{$v} // '');
		is(join(',', @names), join(',', @want), "$refdoc line $t->{line}: the table of $v\'s columns");
		$ncheck++;
		next;
	}

	# the queue settings: exactly configure's settings, with a new queue's defaults
	if ($h[0] eq 'setting' && $h[1] eq 'default')
	{
		my ($conf) = grep { $_->{name} eq 'jobq.configure' } @procs;
		my @want = sort grep { $_ ne 'queue' } split /,/, names_of($conf->{args});
		my (@names, @pairs);
		for my $r (@{ $t->{rows} })
		{
			my @n = map { s/`//gr } split /\s*,\s*/, $r->[0];
			my @d = split /\s*,\s*/, $r->[1];
			push @names, @n;
			push @pairs, [ $n[$_], $d[$_] // $d[0] ] for 0 .. $#n;
		}
		is(join(',', sort @names), join(',', @want), "$refdoc line $t->{line}: the queue settings are configure's");
		$kind_seen{'queue settings'}++;
		$node->safe_psql('tour', q{SELECT jobq.configure('readme_defaults')});
		for my $p (@pairs)
		{
			my ($col, $def) = @$p;
			my $lit = $def eq 'none' ? 'NULL' : "'" . ($def =~ s/'/''/gr) . "'";
			my $type = $node->safe_psql('tour', qq{
				SELECT format_type(atttypid, atttypmod) FROM pg_attribute
				 WHERE attrelid = 'jobq.queues'::regclass AND attname = '$col'});
			my $same = $node->safe_psql('tour', qq{
				SELECT $col IS NOT DISTINCT FROM CAST($lit AS $type)
				  FROM jobq.queues WHERE queue = 'readme_defaults'});
			is($same, 't', "$refdoc line $t->{line}: a new queue's $col is $def");
		}
		$ncheck++;
		next;
	}

	# the health checks: exactly jobq.health()'s, in its order
	if ($h[0] eq 'check')
	{
		my @names = map { $_->[0] =~ s/`//gr } @{ $t->{rows} };
		my $want = $node->safe_psql('tour', 'SELECT string_agg(check_name, \',\') FROM jobq.health()');
		is(join(',', @names), $want, "$refdoc line $t->{line}: the checks of jobq.health(), in order");
		$kind_seen{'health checks'}++;
		$ncheck++;
		next;
	}

	# the GUCs: exactly the jobq.* settings, their defaults and contexts
	if ($h[0] eq 'GUC')
	{
		my %guc;
		for my $row (split /\n/, $node->safe_psql('tour', q{
			SELECT name, boot_val, coalesce(unit, ''), context FROM pg_settings
			 WHERE name LIKE 'jobq.%' ORDER BY name}))
		{
			my ($n, $v, $u, $c) = split /\|/, $row, -1;
			$guc{$n} = { val => $v, unit => $u, context => $c };
		}
		my @names = map { $_->[0] =~ s/`//gr } @{ $t->{rows} };
		is(join(',', sort @names), join(',', sort keys %guc),
			"$refdoc line $t->{line}: the GUC table lists every jobq.* setting");
		$kind_seen{'GUCs'}++;
		my %ctx = (superuser => 'superuser', reload => 'sighup', restart => 'postmaster', user => 'user');
		my %mult = (
			B => 1, kB => 1024, MB => 1024**2, GB => 1024**3,
			ms => 1, s => 1000, min => 60000, h => 3600000, d => 86400000);
		for my $r (@{ $t->{rows} })
		{
			my $n = $r->[0] =~ s/`//gr;
			my $g = $guc{$n} or next;
			is($ctx{ $r->[2] } // $r->[2], $g->{context}, "$refdoc line $t->{line}: context of $n");
			my $def = $r->[1] =~ s/\s*\(.*\)\s*$//r;
			$def = '' if $def eq "''";
			my ($want, $got);
			if ($g->{unit} ne '' && $def =~ /^(-?\d+)\s*([a-zA-Z]*)$/)
			{
				my ($num, $u) = ($1, $2 eq '' ? $g->{unit} : $2);
				my ($gnum, $gu) = $g->{unit} =~ /^(\d*)(\w+)$/;
				$want = $num == -1 ? -1 : $num * ($mult{$u} // die "unknown unit $u");
				$got = $g->{val} == -1 ? -1 : $g->{val} * ($gnum || 1) * $mult{$gu};
			}
			else
			{
				($want, $got) = ($def, $g->{val});
			}
			is($want, $got, "$refdoc line $t->{line}: default of $n ($r->[1])");
		}
		$ncheck++;
		next;
	}

	next unless $h[0] eq 'function' || $h[0] eq 'view / function' || $h[0] eq 'view';
	for my $r (@{ $t->{rows} })
	{
		my $first = $r->[0];
		my @sigs = $first =~ /`(jobq\.\w+)\(([^`]*)\)`/g;
		if (!@sigs)
		{
			# a row of views: `jobq.a`, `jobq.b` (view)
			my @v = $first =~ /`(jobq\.\w+)`/g;
			ok(@v && defined $col_i, "$refdoc line $t->{line}: row '$first' names a function or a view with its columns")
			  or next;
			my $cell = $r->[$col_i];
			for my $v (@v)
			{
				my $want = $views{$v};
				ok(defined $want, "$refdoc line $t->{line}: view $v exists") or next;
				$view_seen{$v} = 1;
				my $got = $cell =~ /^as `(jobq\.\w+)`$/ ? $views{$1} // "<no view $1>" : column_list($cell);
				is($got, $want, "$refdoc line $t->{line}: the columns of $v");
			}
			next;
		}
		# returns: `type`, `TABLE (...)`, several of them split by " / ", or
		# "the columns of `jobq.view`[, then `more columns`]"
		my @rets;
		if (defined $ret_i)
		{
			my $cell = $r->[$ret_i];
			@rets = $cell =~ m{^`[^`]+`(?:\s+/\s+`[^`]+`)*$} ? split(m{\s+/\s+}, $cell) : ($cell);
		}
		while (my ($name, $args) = splice @sigs, 0, 2)
		{
			my $ret = @rets > 1 ? shift @rets : $rets[0];
			my ($cargs, $ndef) = parse_args($args);
			my @cand = grep { $_->{name} eq $name && $_->{args} eq $cargs } @procs;
			ok(scalar(@cand) == 1, "$refdoc line $t->{line}: $name($args) is a function")
			  or diag("$refdoc: $cargs\ncatalog: "
				  . join("\n         ", map { "$_->{name}($_->{args})" } grep { $_->{name} eq $name } @procs));
			my $p = $cand[0] or next;
			$p->{seen}++;
			is($ndef, $p->{ndefaults}, "$refdoc line $t->{line}: $name: arguments with DEFAULT");
			if (defined $col_i)
			{
				# the columns cell lists a table function's result columns
				is(column_list($r->[$col_i]), names_of($p->{outs}),
					"$refdoc line $t->{line}: the result columns of $name");
			}
			next unless defined $ret;
			$ret =~ s/^`([^`]*)`$/$1/;
			if ($ret =~ /^TABLE \((.*)\)$/)
			{
				my ($couts) = parse_args($1);
				is($couts, $p->{outs}, "$refdoc line $t->{line}: $name returns TABLE (...)");
			}
			elsif ($ret =~ /^the columns of `(jobq\.\w+)`(?:, then `([^`]*)`)?$/)
			{
				my ($v, $more) = ($1, $2);
				my $want = join(',', grep { $_ ne '' } $views{$v} // '', $more ? names_of((parse_args($more))[0]) : ());
				is(names_of($p->{outs}), $want, "$refdoc line $t->{line}: $name returns the columns of $v");
			}
			elsif ($ret =~ /^[\w ]+(?:\[\])?$/)
			{
				is(canon($ret), $p->{ret}, "$refdoc line $t->{line}: $name returns $ret");
			}
			else
			{
				fail("$refdoc line $t->{line}: $name: cannot read the returns cell '$ret'");
			}
		}
	}
	$ncheck++;
}
cmp_ok($ncheck, '>=', 10, "$refdoc has its reference tables");
for my $k ('queue settings', 'health checks', 'GUCs')
{
	is($kind_seen{$k} // 0, 1, "$refdoc has one table of the $k");
}
for my $p (@procs)
{
	ok($p->{seen}, "$p->{name}($p->{args}) is in a function table of $refdoc");
}
for my $v (sort keys %views)
{
	ok($view_seen{$v}, "view $v is in a table of views of $refdoc");
}

# ---------------------------------------------------------------- links

# a heading's anchor as GitHub makes it
sub slug
{
	my ($h) = @_;
	$h =~ s/\[([^\]]*)\]\([^)]*\)/$1/g;
	$h = lc $h;
	$h =~ s/[^\p{L}\p{N}\s_-]//g;
	$h =~ s/ /-/g;
	return $h;
}

# anchors and "## " titles of a markdown file
my %anchors;
sub anchors_of
{
	my ($path) = @_;
	return $anchors{$path} if $anchors{$path};
	my (%a, %count, @h2, $in_code);
	for my $l (read_lines($path))
	{
		if ($l =~ /^\s*```/) { $in_code = !$in_code; next; }
		next if $in_code;
		next unless $l =~ /^(#{1,6})\s+(.*?)\s*#*\s*$/;
		my $s = slug($2);
		my $n = $count{$s}++;
		$a{ $n ? "$s-$n" : $s } = 1;
		push @h2, $s if length($1) == 2;
	}
	return $anchors{$path} = { anchors => \%a, h2 => \@h2 };
}

for my $doc (@docs)
{
	my $path = "$root/$doc";
	my ($in_code, $nlinks) = (0, 0);
	my $ln = 0;
	for my $l (@{ $lines{$doc} })
	{
		$ln++;
		if ($l =~ /^\s*```/) { $in_code = !$in_code; next; }
		next if $in_code;
		while ($l =~ /\]\(([^()\s]+)\)/g)
		{
			my $target = $1;
			next if $target =~ m{^[a-z]+:};    # http:, mailto:
			my ($file, $frag) = $target =~ /^([^#]*)(?:#(.*))?$/;
			my $tpath = $file eq '' ? $path : File::Spec->catfile(dirname($path), $file);
			$nlinks++;
			ok(-e $tpath, "$doc line $ln: link target $file exists") or next;
			next unless defined $frag;
			ok(-f $tpath && $tpath =~ /\.md$/ && anchors_of($tpath)->{anchors}{$frag},
				"$doc line $ln: #$frag is a heading of " . ($file || $doc));
		}
	}
	ok(!$in_code, "$doc: every code block is closed (the links after an open one go unchecked)");
	cmp_ok($nlinks, '>', 0, "$doc has links to check");
}

# a table of contents lists every "## " section of its file
for my $doc (@docs)
{
	my @l = @{ $lines{$doc} };
	my @toc_b = grep { $l[$_] =~ /^<!-- toc:begin -->\s*$/ } 0 .. $#l;
	my @toc_e = grep { $l[$_] =~ /^<!-- toc:end -->\s*$/ } 0 .. $#l;
	next if $doc ne 'README.md' && !@toc_b && !@toc_e;    # only README.md must have one
	is(scalar(@toc_b) . ' ' . scalar(@toc_e), '1 1', "$doc has one toc:begin and one toc:end")
	  or next;
	my %in_toc = map { $_ => 1 } join("\n", @l[ $toc_b[0] .. $toc_e[0] ]) =~ /\]\(#([^)]+)\)/g;
	for my $s (@{ anchors_of("$root/$doc")->{h2} })
	{
		ok($in_toc{$s}, "$doc: the table of contents links to section #$s");
	}
}

$node->stop;
done_testing();
