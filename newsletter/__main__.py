from newsletter.cli import main

main()
