# Allocation-heavy Perl workload for run_real_program.sh: Perl mallocs every scalar
# buffer, hash table and array, so this drives a preloaded malloc hard. srand() makes
# rand() deterministic and hash keys are sorted before printing, so the output (counts
# and digests) is the same on every run.
use strict;
use warnings;
use Digest::SHA qw(sha256_hex);

srand(20240611);
my @letters = ('a' .. 'z');
sub word { join '', map { $letters[int rand 26] } 1 .. 3 + int rand 10 }

# Hashes with many distinct string keys.
my @words = map { word() } 1 .. 150_000;
my %count;
$count{ $words[int rand @words] }++ for 1 .. 500_000;
my @top = (sort { $count{$b} <=> $count{$a} || $a cmp $b } keys %count)[0 .. 9];
print "distinct ", scalar(keys %count), " top @top\n";

# Building, joining and splitting a text of a few MB.
my $text = join "\n", map { sprintf "%07d %s %.3f %x", $_, $words[int rand @words], rand, int rand 1e9 } 1 .. 150_000;
my @fields = map { [split / /] } split /\n/, $text;
print "text ", length($text), " lines ", scalar(@fields), "\n";

# Regexes over the whole text.
my @pairs = $text =~ /\b([a-z]+) (0\.\d{3})/g;
(my $rewritten = $text) =~ s/([a-z]+) (\d)\.(\d+)/<$2:$1:$3>/g;
print "pairs ", @pairs / 2, " sub ", sha256_hex($rewritten), "\n";

# Sorting by several keys.
my @order = sort { $a->[1] cmp $b->[1] || $b->[2] <=> $a->[2] || $a->[0] cmp $b->[0] } @fields;
print "sorted ", sha256_hex(join ',', map { $_->[0] } @order), "\n";

# Delete half of a big hash, then refill it: frees and reuses its entries.
my @unique = sort keys %{ { map { $_ => 1 } @words } };
my %table = map { $_ => uc($_) x 3 } @unique;
delete @table{ @unique[grep { $_ % 2 == 0 } 0 .. $#unique] };
$table{ $unique[$_ * 2] . $_ } = reverse $unique[$_ * 2] for 0 .. int($#unique / 2);
print "refill ", scalar(keys %table), " ", sha256_hex(join ',', map { "$_=$table{$_}" } sort keys %table), "\n";
