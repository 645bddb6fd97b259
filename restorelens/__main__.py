from restorelens.cli import main

main()
